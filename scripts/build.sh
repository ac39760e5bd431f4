#!/usr/bin/env bash
# Configures and builds kvx into BUILD_DIR (default: build). Extra arguments go to cmake's configure step,
# e.g. scripts/build.sh build-asan -DKVX_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
# Ninja where it is installed (scripts/setup.sh installs it), for a new build folder; one already configured keeps
# its generator. Make's per-target ordering compiled no file of a target until the targets it links were
# built, which left a core idle at each such edge: the plain build took 400 s under make -j2, 342 s under
# Ninja (which waits only to link) on the 2-core development machine.
generator=()
if [ ! -f "$build_dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B "$build_dir" "${generator[@]}" -DPython3_EXECUTABLE="$PWD/.venv/bin/python" "$@"
cmake --build "$build_dir" -j "$(nproc)"
