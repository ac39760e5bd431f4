#!/bin/bash
# Builds and runs CUDA kernel test files on the CPU, with no GPU (README.md): each .cu with its launches
# rewritten (rewrite.py) and compiled as C++ with emu.h, its Catch2 test file, the reference kernels, under
# ASan + UBSan (SAN=thread for races: a separate OUT, since objects are cached).
#   tools/cuda_emulation/run.sh [gemv kv_cache_ops elementwise sampling paged_attention] [-- catch2 args]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp/kvx_cuda_emulation}
san=${SAN:-address,undefined}
names=()
while (($#)) && [ "$1" != "--" ]; do names+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
((${#names[@]})) || names=(gemv kv_cache_ops elementwise sampling paged_attention)
flags="-std=c++20 -O1 -g -fsanitize=$san -fno-sanitize-recover=undefined -fno-omit-frame-pointer -I$repo -I/usr/local/cuda/include -w"
mkdir -p "$out/gen" "$out/obj"
build() { [ -f "$out/obj/$2.o" ] || g++ $flags ${3:-} -c "$1" -o "$out/obj/$2.o"; }
build "$here/main.cpp" main
build "$here/runtime.cpp" runtime
build "$repo/kernels/reference.cpp" reference
build "$repo/engine/runtime/sampler.cpp" sampler
build "$repo/cuda/kernels/attention_plan.cpp" attention_plan
for k in "${names[@]}"; do
  python3 "$here/rewrite.py" "$repo/cuda/kernels/$k.cu" "$out/gen/$k.cpp"
  g++ $flags -include "$here/emu.h" -c "$out/gen/$k.cpp" -o "$out/obj/$k.o" &
  g++ $flags -c "$repo/cuda/kernels/${k}_test.cpp" -o "$out/obj/${k}_test.o" &
  wait
  g++ $flags "$out/obj/$k.o" "$out/obj/${k}_test.o" "$out/obj/reference.o" "$out/obj/runtime.o" "$out/obj/main.o" \
      "$out/obj/sampler.o" "$out/obj/attention_plan.o" -o "$out/emu_$k" -lpthread
  echo "== $k"
  "$out/emu_$k" "$@"
done
