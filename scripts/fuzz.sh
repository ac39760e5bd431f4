#!/usr/bin/env bash
# Builds kvx's libFuzzer targets (tests/fuzz/: clang, ASan + UBSan, into build-fuzz/) and runs one target, or
# all of them (as many at a time as there are cores), for SECONDS each:
#   scripts/fuzz.sh TARGET|all SECONDS
# Each run starts from the committed seeds (tests/fuzz/corpus/TARGET) and the inputs earlier runs found
# (build-fuzz/corpus/TARGET). A run fails on a crash, a sanitizer report, a hang of more than 10 s on one
# input, or an allocation of more than 1 GiB (a size read from the input and trusted); the input that did it is
# written to build-fuzz/crashes/. The targets: ls tests/fuzz/fuzz_*.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/fuzz.sh TARGET|all SECONDS"
target=${1:?$usage}
seconds=${2:?$usage}
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is missing (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
build=build-fuzz
# -g1 (line tables): what a finding's report needs, and a faster build than -g (as the sanitizer build).
generator=()  # Ninja for a new folder, as scripts/build.sh
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
CC=clang CXX=clang++ cmake -S . -B "$build" "${generator[@]}" -DKVX_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null

if [ "$target" = all ]; then
  targets=$(cd tests/fuzz && ls fuzz_*.cpp | grep -v fuzz_support | sed 's/^fuzz_//; s/\.cpp$//')
else
  targets=$target
fi
mkdir -p "$build/crashes"

# One target: its line on success, the finding and 1 otherwise.
run_one() {
  local t=$1 corpus="$build/corpus/$1" log="$build/fuzz_$1.log" runs
  [ -x "$build/bin/fuzz_$t" ] || { echo "fuzz: no target '$t' (see tests/fuzz/)" >&2; return 1; }
  mkdir -p "$corpus"
  if "$build/bin/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
       -print_final_stats=1 -artifact_prefix="$build/crashes/$t-" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    echo "fuzz: $t: $runs executions in $seconds s, no finding ($(ls "$corpus" | wc -l) inputs in its corpus)"
  else
    echo "fuzz: $t: FOUND A PROBLEM; the log is $log, the input in $build/crashes/:" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$log" >&2 || tail -20 "$log" >&2
    return 1
  fi
}

# A libFuzzer run is one process on one core: the targets run nproc at a time, each for its full SECONDS
# (one after another, CI's second core sat idle for 80 s). Every target runs even after one has failed.
per_round=$(nproc)
set -- $targets
failed=0
while (( $# )); do
  pids=()
  for t in "${@:1:per_round}"; do
    run_one "$t" &
    pids+=($!)
  done
  shift $(( $# < per_round ? $# : per_round ))
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
done
exit $failed
