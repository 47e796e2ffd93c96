#!/usr/bin/env bash
# Build schema_oracle (llama.cpp's JSON-schema -> GBNF converter behind JSON lines) against the static
# libraries of the llama.cpp tree chatcodec matches (llama-cpp-python 0.3.36's vendor/llama.cpp, 0c1e570),
# as built by ../../../shared/tools/llamacpp-oracle/build.sh (run that first if the libraries are missing).
# Usage: dev/schema_gbnf/build.sh [OUT]   (default ~/.cache/chatcodec-oracle/schema_oracle; ~1 min)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${CHATCODEC_ORACLE_DIR:-$HOME/.cache/chatcodec-oracle}
L=$ROOT/src/llama_cpp_python-0.3.36/vendor/llama.cpp
OUT=${1:-$ROOT/schema_oracle}
if [ ! -f "$L/build/common/libllama-common.a" ]; then
  echo "no llama.cpp build under $L/build: run ../shared/tools/llamacpp-oracle/build.sh first" >&2
  exit 1
fi
g++ -O2 -std=c++17 -I"$L/common" -I"$L/src" -I"$L/include" -I"$L/ggml/include" -I"$L/vendor" \
  "$HERE/schema_oracle.cpp" -Wl,--start-group $(find "$L/build" -name '*.a' | sort) -Wl,--end-group \
  -lpthread -ldl -fopenmp -o "$OUT"
echo "built $OUT"
