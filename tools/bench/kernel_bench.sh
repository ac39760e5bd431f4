#!/usr/bin/env bash
# Runs kvx-bench's whole sweep (every kernel at the sizes that matter, 1 and all threads), writes Google
# Benchmark's JSON as it emits it to bench/results/kernels.json, and prints the summary
# (kvx_tools.bench.kernel_summary). About 10 minutes on 2 cores.
#
#   tools/bench/kernel_bench.sh [kvx-bench flags, e.g. --simd avx2 --benchmark_filter=gemv]
#
# KVX_BUILD_DIR picks the build (default: build); OMP_NUM_THREADS the largest thread count.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench="${KVX_BUILD_DIR:-build}/bin/kvx-bench"
if [[ ! -x "$bench" ]]; then
  echo "kernel_bench.sh: $bench not found: build it (scripts/build.sh; it needs libbenchmark-dev)" >&2
  exit 1
fi
out=bench/results/kernels.json
mkdir -p "$(dirname "$out")"
# Five repetitions of at least 0.05 s each, reported as their mean, median, stddev and cv (the summary and
# the plots use the medians): a shared machine's load comes and goes within a sweep.
"$bench" --benchmark_min_time=0.05 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out" --benchmark_out_format=json "$@"
PYTHONPATH="$PWD/tools${PYTHONPATH:+:$PYTHONPATH}" python3 -m kvx_tools.bench.kernel_summary "$out"
