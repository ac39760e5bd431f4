// A libFuzzer target without libFuzzer: the sanitizer build's (GCC, ASan + UBSan) way to run the fuzz targets
// in ctest, where the clang build that coverage-guided fuzzing needs (scripts/fuzz.sh) is not made.
//
//   fuzz_replay_TARGET [--mutate SECONDS] [--seed N] PATH...
//
// Every file under each PATH (the target's corpus) goes through LLVMFuzzerTestOneInput once. With --mutate it
// then keeps calling it until SECONDS have passed, on copies of those inputs changed by a few random edits
// (bytes set, flipped, inserted, removed, copied from another input; the input cut short): blind mutation, far
// weaker than libFuzzer's search, which is steered by coverage, but run under the sanitizers on every CI run.
// A finding is what it is to libFuzzer: a crash, an exception other than kvx::Error escaping the target (the
// targets let only that pass), a sanitizer's report. The input that caused it is written to
// fuzz_replay_crash_SEED (in the working folder) before each call and removed after it, so a finding leaves
// it behind. SEED is random unless --seed gives it, and printed.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

using Input = std::vector<uint8_t>;

Input read_input(const fs::path& path) {
    std::ifstream file(path, std::ios::binary);
    return Input(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

void run_one(const Input& input, const std::string& keep_as) {
    {
        std::ofstream(keep_as, std::ios::binary).write(reinterpret_cast<const char*>(input.data()),
                                                       static_cast<std::streamsize>(input.size()));
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    fs::remove(keep_as);
}

// One to four random edits of `input`, `other` the source of copied bytes.
Input mutated(Input input, const Input& other, std::mt19937& rng) {
    auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
        const size_t at = below(input.size() + 1);
        switch (rng() % 6) {
            case 0:  // a byte set: 0, 0xff, a digit, a quote or anything
                if (at < input.size()) {
                    const uint8_t picks[] = {0, 0xff, '0', '9', '"', '{', '[', static_cast<uint8_t>(rng())};
                    input[at] = picks[rng() % sizeof(picks)];
                }
                break;
            case 1:  // a bit flipped
                if (at < input.size()) input[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
                break;
            case 2:  // bytes inserted
                input.insert(input.begin() + static_cast<std::ptrdiff_t>(at), 1 + below(8), static_cast<uint8_t>(rng()));
                break;
            case 3:  // bytes removed
                input.erase(input.begin() + static_cast<std::ptrdiff_t>(at),
                            input.begin() + static_cast<std::ptrdiff_t>(std::min(input.size(), at + 1 + below(16))));
                break;
            case 4: {  // a run of another input's bytes copied in
                if (other.empty()) break;
                const size_t from = below(other.size()), len = 1 + below(std::min<size_t>(other.size() - from, 64));
                input.insert(input.begin() + static_cast<std::ptrdiff_t>(at), other.begin() + static_cast<std::ptrdiff_t>(from),
                             other.begin() + static_cast<std::ptrdiff_t>(from + len));
                break;
            }
            default:  // cut short
                input.resize(at);
                break;
        }
    }
    return input;
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 0;
    uint32_t seed = std::random_device{}();
    std::vector<Input> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--mutate" && i + 1 < argc) {
            seconds = std::atof(argv[++i]);
        } else if (arg == "--seed" && i + 1 < argc) {
            seed = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
        } else if (fs::is_directory(arg)) {
            for (const auto& entry : fs::recursive_directory_iterator(arg))
                if (entry.is_regular_file()) inputs.push_back(read_input(entry.path()));
        } else if (fs::is_regular_file(arg)) {
            inputs.push_back(read_input(arg));
        } else {
            std::fprintf(stderr, "fuzz replay: '%s' is not a file or folder\n", arg.c_str());
            return 2;
        }
    }
    if (inputs.empty()) {
        std::fprintf(stderr, "fuzz replay: no input: a replay that runs nothing must not pass\n");
        return 2;
    }
    const std::string keep_as = "fuzz_replay_crash_" + std::to_string(seed);
    for (const Input& input : inputs) run_one(input, keep_as);
    std::mt19937 rng(seed);
    long mutations = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (seconds > 0 && std::chrono::steady_clock::now() < end) {
        run_one(mutated(inputs[rng() % inputs.size()], inputs[rng() % inputs.size()], rng), keep_as);
        ++mutations;
    }
    std::printf("fuzz replay: %zu corpus inputs and %ld mutations (seed %u), no finding\n", inputs.size(), mutations, seed);
    return 0;
}
