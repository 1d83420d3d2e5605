"""The llama.cpp engines: `llamacpp`, llama.cpp in this process (llama-cpp-python's `Llama`: a GGUF, optionally a
GGUF LoRA, on CPU) with its probability reader; and `llamacpp-server` (`server.ENGINE`), llama-cpp-python's
OpenAI-compatible server on 127.0.0.1, which the engine starts and stops itself (`LlamaCppServer`), with the
reader of a served judge's probabilities (`LlamaCppProbabilities`).

`spec.model` is the model's Hugging Face folder or hub id, for its tokenizer and chat template (an
adapter folder's own tokenizer wins, as on transformers); `spec.options`:
- `gguf` (required): the model's GGUF file; `lora`: a GGUF LoRA (`spanjudge export --gguf-lora`);
- `n_ctx` (default 4096), `n_threads` (default: `OMP_NUM_THREADS` when set, else every core this process
  may use: `core.cpus`);
- `reuse_prefix` (default on): requests run in the order of their token ids, so those sharing a
  prompt prefix (every output of one input) follow each other, and llama.cpp reads only what a
  prompt does not share with the one before (llama-cpp-python keeps the longest common prefix of
  its KV cache); false clears the cache before every request, to measure what reuse saves;
- `grammar`: a GBNF grammar every reply is held to (set by the judge with `constrained=True`);
- `adapter`, `trust_remote_code`: set by the judge (the tokenizer's folder, and whether to run its code).

Before `Llama()` loads anything, the files are checked (`gguf_files.check_model_files`: each a GGUF,
the LoRA an adapter that fits the model, the tokenizer of the model's vocabulary): one line each. What
cannot be checked from the files (a llama.cpp built for another CPU, a damaged tensor) is tried once per
process in a child process that loads the model and computes one token (`probe`): a crash there is
reported with its signal and output, and this process lives.

The judge's probabilities (`probabilities=True`) are read on a second llama.cpp context of the same GGUF
and LoRA (`LlamaCppProbabilityReader`, below), made at the first reading: it runs a reply's
alternatives side by side as sequences of one cache, which `Llama`'s single-sequence context cannot. The
prompt generation has just read is copied into it (KV cells, not read again), so `probabilities=True`
costs the reply and the alternatives only.

    local.py        the in-process backend (`LlamaCppBackend`), `checked_files`, `probe`
    reader.py       the probability reader (`LlamaCppProbabilityReader`)
    server.py       the served llama.cpp (`LlamaCppServer`) and a served judge's reader (`LlamaCppProbabilities`)
    gguf_files.py   the GGUF, LoRA and tokenizer checks; build.py the build flags; lora_export.py PEFT -> GGUF LoRA
"""

from __future__ import annotations

from .local import ENGINE, LlamaCppBackend, checked_files, probe
from .reader import LlamaCppProbabilityReader
from .server import LlamaCppProbabilities, LlamaCppServer

__all__ = [
    "ENGINE",
    "LlamaCppBackend",
    "LlamaCppProbabilities",
    "LlamaCppProbabilityReader",
    "LlamaCppServer",
    "checked_files",
    "probe",
]
