// The runner: every row of the table on every implementation, a line per failure, one summary line.
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <omp.h>

#include "tests/kernel_ops/op_harness.h"

namespace kvx::ops {

const std::vector<float>& oracle_once(const std::string& op, const Shape& shape, uint32_t seed,
                                      const std::function<std::vector<float>()>& compute) {
    // Only the last row's: the next shape of the table has another seed.
    static std::string key;
    static std::vector<float> want;
    std::string row = op + '|' + shape.label + '|' + std::to_string(seed);
    if (row != key) {
        want = compute();
        key = std::move(row);
    }
    return want;
}

int run_table(const std::vector<Implementation>& implementations, const std::string& filter) {
    const auto start = std::chrono::steady_clock::now();
    int ops = 0, shapes = 0, rows = 0, passed = 0, failed = 0, not_applicable = 0;
    std::map<std::string, int> passed_by_impl;
    const int default_threads = omp_get_max_threads();
    // "name": the ops whose name contains it; "!name": the others (ctest runs the table in two parts).
    const bool except = !filter.empty() && filter[0] == '!';
    const std::string part = except ? filter.substr(1) : filter;
    for (const Op& op : op_table()) {
        if (!part.empty() && (op.name.find(part) == std::string::npos) != except) continue;
        ++ops;
        shapes += static_cast<int>(op.shapes.size());
        uint32_t seed = 1;
        for (const Shape& shape : op.shapes) {
            ++seed;  // one seed a shape: every implementation sees the same inputs
            for (const Implementation& impl : implementations) {
                if (impl.is_reference && !op.checks_reference) continue;  // it would be its own oracle
                if (!op.applies(impl, shape)) {
                    ++not_applicable;
                    continue;
                }
                ++rows;
                Verdict verdict;
                omp_set_num_threads(impl.threads > 0 ? impl.threads : default_threads);
                try {
                    verdict = op.check(impl, shape, seed * 7919u);
                } catch (const std::exception& e) {
                    verdict = {false, std::string("threw: ") + e.what()};
                }
                omp_set_num_threads(default_threads);
                if (verdict.pass) {
                    ++passed;
                    ++passed_by_impl[impl.name];
                } else {
                    ++failed;
                    std::printf("FAIL %s [%s] on %s: %s\n", op.name.c_str(), shape.label.c_str(), impl.name.c_str(),
                                verdict.detail.c_str());
                }
            }
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("kernel ops: %d ops x %d shapes x %zu implementations:", ops, shapes, implementations.size());
    for (const Implementation& impl : implementations) std::printf(" %s", impl.name.c_str());
    std::printf("\nkernel ops: %d rows run, %d passed, %d failed, %d not applicable, in %.1f s", rows, passed, failed,
                not_applicable, seconds);
    std::printf(" (passed:");
    for (const auto& [name, count] : passed_by_impl) std::printf(" %s %d", name.c_str(), count);
    std::printf(")\n");
    if (rows == 0) {
        std::printf("kernel ops: no row ran: a harness that checks nothing must not pass\n");
        return 1;
    }
    return failed;
}

}  // namespace kvx::ops
