// The wall time since start, in seconds: the prefill and decode times GenerationStats and BeamSearchStats report.
#pragma once

#include <chrono>

namespace kvx {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kvx
