#include "engine/serving/serving_metrics.h"

#include <algorithm>
#include <utility>

namespace kvx {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
    const auto first = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
    for (size_t i = static_cast<size_t>(first); i < counts.size(); ++i) ++counts[i];
    sum += value;
    ++count;
}

void TokenRate::drop_before(double time) {
    while (!steps_.empty() && steps_.front().time < time) steps_.pop_front();
}

void TokenRate::add(double now, uint64_t prefill, uint64_t decode) {
    drop_before(now - window_);
    steps_.push_back({now, prefill, decode});
}

void TokenRate::rates(double now, double& prefill, double& decode) {
    drop_before(now - window_);
    uint64_t p = 0, d = 0;
    for (const Step& s : steps_) {
        p += s.prefill;
        d += s.decode;
    }
    prefill = static_cast<double>(p) / window_;
    decode = static_cast<double>(d) / window_;
}

}  // namespace kvx
