#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. With --sanitize, the same suite in an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${1:-}" = "--sanitize" ]; then
  build_dir=build-asan
  scripts/build.sh "$build_dir" -DKVX_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  build_dir=build
  scripts/build.sh "$build_dir"
fi
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
