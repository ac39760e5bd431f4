#!/usr/bin/env bash
# Configures and builds kvx into BUILD_DIR (default: build). Extra arguments go to cmake's configure step,
# e.g. scripts/build.sh build-asan -DKVX_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
cmake -S . -B "$build_dir" -DPython3_EXECUTABLE="$PWD/.venv/bin/python" "$@"
cmake --build "$build_dir" -j "$(nproc)"
