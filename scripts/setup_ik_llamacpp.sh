#!/usr/bin/env bash
# Installs kvx's second CPU peer, ik_llama.cpp, as PyPI ships it: ik-llama-cpp-python 0.1.5 (a manylinux wheel
# that carries the fork's libggml and libllama), in a virtual environment of its own.
#   scripts/setup_ik_llamacpp.sh [VENV]      VENV defaults to <repo>/.cache/ik-venv
# Prints VENV's python, which gguf_speed takes as --ik-python. A second run with the package present does nothing.
#
# Its own environment, because its package and llama-cpp-python's each load a libllama.so and a libggml.so of the
# same names: in one environment, whichever is imported first would serve both.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$repo/.cache/ik-venv}
version=0.1.5
python=$venv/bin/python

if [[ -x $python ]] && "$python" -c "import ik_llama_cpp" 2>/dev/null \
    && [[ $("$python" -m pip show ik-llama-cpp-python 2>/dev/null | sed -n 's/^Version: //p') == "$version" ]]; then
  echo "$python"
  exit 0
fi
python3 -m venv "$venv"
"$python" -m pip install --quiet --upgrade pip
# --only-binary: the wheel is what users get; a build from source would be another peer.
"$python" -m pip install --quiet --only-binary ik-llama-cpp-python "ik-llama-cpp-python==$version" numpy
"$python" -c "import ik_llama_cpp" || { echo "setup_ik_llamacpp: ik_llama_cpp does not import in $venv" >&2; exit 1; }
echo "$python"
