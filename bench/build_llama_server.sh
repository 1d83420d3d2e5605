#!/usr/bin/env bash
# Build upstream llama.cpp's `llama-server` (it has parallel slots; llama-cpp-python's
# server answers one request at a time) from the llama.cpp sources vendored in the
# llama-cpp-python sdist on PyPI. About 5 minutes on 2 cores; cached afterwards.
# Built for this CPU's instruction sets but never -march=native nor AMX (a CPU that reports AMX in
# a VM that forbids it dies at the first completion; inference/backends/llamacpp/build.py), and cached under
# those flags, so a binary built for another CPU is never reused. Prints the binary's path.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PY="${PYTHON:-python3}"
FLAGS="$("$PY" "$(dirname "$0")/../inference/backends/llamacpp/build.py" cmake-args)"
TAG="$(printf '%s' "$FLAGS" | sha256sum | cut -c1-12)"
ROOT="${SPANJUDGE_CACHE:-$HOME/.cache/spanjudge}/llama-server-$VERSION-$TAG"
BIN="$ROOT/build/bin/llama-server"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$ROOT"
# the sdist itself, found in PyPI's simple index: `pip download --no-binary` would build every
# build dependency (cmake included) from source just to read the package's metadata
mkdir -p "$ROOT/sdist"
"$PY" - "$VERSION" "$ROOT/sdist" <<'PYTHON' >&2
import re, sys, urllib.request
version, folder = sys.argv[1], sys.argv[2]
name = f"llama_cpp_python-{version}.tar.gz"
with urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60) as reply:
    url = re.search(rf'href="([^"#]*/{re.escape(name)})', reply.read().decode())
if url is None:
    sys.exit(f"{name} is not on PyPI's simple index")
urllib.request.urlretrieve(url.group(1), f"{folder}/{name}")
PYTHON
tar -xzf "$ROOT"/sdist/llama_cpp_python-"$VERSION".tar.gz -C "$ROOT"
SRC="$ROOT/llama_cpp_python-$VERSION/vendor/llama.cpp"
# shellcheck disable=SC2086  # FLAGS is a list of -D switches
cmake -S "$SRC" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $FLAGS >&2
cmake --build "$ROOT/build" --target llama-server -j "$(nproc)" >&2
echo "$BIN"
