#!/usr/bin/env bash
# Installs what kvx needs and is missing: Debian packages for the build, and a Python virtual environment
# (.venv) with the exporter/converter/reference packages of tools/requirements.txt and the tools themselves,
# the package kvx_tools (tools/pyproject.toml), installed editable.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang and libclang-rt-14-dev: libFuzzer, for scripts/fuzz.sh. libcpp-httplib-dev: kvx serve's HTTP server.
# ninja-build: the builds' generator (scripts/build.sh says why).
packages=(build-essential cmake ninja-build catch2 nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev pkg-config python3 python3-venv python3-pip
          clang libclang-rt-14-dev)
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
# Reinstall whenever tools/requirements.txt changed since the last install (a copy is kept in the venv).
if ! cmp -s tools/requirements.txt .venv/kvx-requirements.txt; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
  cp tools/requirements.txt .venv/kvx-requirements.txt
fi
# kvx_tools editable, so that `python -m kvx_tools....` runs the checkout's sources from anywhere; again
# whenever tools/pyproject.toml changed (the build itself needs no install: it sets PYTHONPATH).
if ! cmp -s tools/pyproject.toml .venv/kvx-pyproject.toml; then
  echo "setup: installing kvx_tools (tools/, editable) into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e tools/
  cp tools/pyproject.toml .venv/kvx-pyproject.toml
fi
