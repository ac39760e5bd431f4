#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. With --sanitize, the same suite in an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${1:-}" = "--sanitize" ]; then
  build_dir=build-asan
  # -O1 -g1 (line tables): UBSan's checks make -O2 -g compile 2.6x slower, and line numbers are what a
  # sanitizer's report needs.
  # The CUDA backend on its CPU emulation (tools/cuda_emulation), not on the CUDA runtime: ASan and the CUDA
  # runtime do not mix (its driver maps memory where ASan keeps its shadow), the plain run compiles the backend
  # with nvcc, and here its kernels, the backend and kvx --device cuda run, checked by ASan + UBSan (label
  # cuda-emulated).
  # Without the avx512vnni level (cpu/kernels/CMakeLists.txt says why).
  # Without the benchmarks (tools/CMakeLists.txt says why).
  scripts/build.sh "$build_dir" -DKVX_SANITIZE=ON -DKVX_CUDA=OFF -DKVX_CUDA_EMULATION=ON -DKVX_CPU_AVX512_VNNI=OFF \
    -DKVX_BUILD_BENCHMARKS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The Python tests (label python) run no instrumented code: the plain run has them already. SmolLM2 on the
  # CUDA emulation (label cuda-emulation-slow) would take longer than the rest of the suite.
  skip_labels=(-LE "python|cuda-emulation-slow")
else
  build_dir=build
  scripts/build.sh "$build_dir"
  skip_labels=()
fi
# ctest -j N runs N test processes of N OpenMP threads each on N cores; threads that spin while they wait
# for a barrier take the cores from the others (a test ran 2.5x slower so). Sleeping waiters cost little here.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "${skip_labels[@]}"
