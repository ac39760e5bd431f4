#!/usr/bin/env bash
# Regenerates the measured part of docs/benchmarks.md: the end-to-end benchmark (bench/results/e2e.json),
# then the figures (docs/img/*.png) and the tables, from the JSON in bench/results/.
#   tools/bench/run_all.sh [kvx_tools.bench.e2e_speed options: --quick, --runs N, --runc PATH, ...]
#   tools/bench/run_all.sh --plots-only      # figures and tables from the committed JSON, nothing measured
# bench/results/kernels.json comes from the kernel benchmarks; its figure is drawn when the file is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
# The checkout's kvx_tools, whatever copy is installed; the peers e2e_speed starts inherit it.
export PYTHONPATH="$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"
if [[ "${1:-}" != --plots-only ]]; then
    $py -m kvx_tools.bench.e2e_speed "$@"
fi
$py -m kvx_tools.bench.plot_benchmarks
$py -m kvx_tools.bench.e2e_tables --update docs/benchmarks.md
