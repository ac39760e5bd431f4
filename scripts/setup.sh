#!/usr/bin/env bash
# Installs what kvx needs and is missing: Debian packages for the build, and a Python virtual environment
# (.venv) with the exporter/converter/reference packages of tools/requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake catch2 nlohmann-json3-dev libcli11-dev python3 python3-venv python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import onnx, onnxruntime, numpy, safetensors, gguf, tokenizers, jinja2" 2>/dev/null; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
fi
