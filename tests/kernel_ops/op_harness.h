// One table-driven harness for the kernel contract (kernels/kernels.h), after llama.cpp's test-backend-ops:
// every row is (op, shape, implementation), and every implementation is held to one oracle, the reference
// kernels (kernels/reference.cpp, sums in double), or, where an op needs a tighter one, an oracle the harness
// computes in double itself (op_table.cpp). The tolerances are one table (tolerances.cpp), each with why.
//
// An implementation is a KernelTable over host memory: a SIMD level of cpu/kernels as it is, or the CUDA
// launch functions behind adapters that copy the host buffers to the device, launch and copy back
// (cuda_host_kernels.h). The two programs (cpu_ops_main.cpp, cuda_ops_main.cpp) differ only in that list.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quant_matrix.h"

namespace kvx::ops {

// One implementation of the contract, over host pointers.
struct Implementation {
    std::string name;      // "cpu-avx2", "cuda"
    KernelTable table;     // a null entry: the implementation has no such op (CUDA: matmuls)
    // The SIMD levels round x to int8 for matmul_q (kernels.h); the reference and CUDA take x exactly.
    bool rounds_quant_x = false;
    // Most rows of x its matmuls take; 0: any. CUDA's GEMVs stop at kGemvMaxRows (the backend sends more
    // rows to cuBLAS, which is not a kernel of the contract).
    int max_matmul_rows = 0;
    // Whether matmul_q reads QuantLayout::row_groups (CUDA reads rows only).
    bool reads_quant_row_groups = true;
    // The GPU's expf / tanhf / erfcf (2 to 4 ulp) instead of the CPU levels' polynomials, whose bounds the
    // tight tolerances were measured on: the table's device_value applies (tolerances.cpp).
    bool device_math = false;
    // The reference itself: a row only of ops whose oracle the harness computes (Op::checks_reference).
    bool is_reference = false;
    // OpenMP threads its rows run on; 0: the process's default (omp_get_max_threads). The CPU levels split
    // work by thread, so the one-thread and the many-thread paths are different code to check.
    int threads = 0;
};

// The quantized matrix of a matmul_q row.
struct QuantForm {
    int bits = 4;
    int block = 32;
    QuantOffset offset = QuantOffset::none;
    QuantScales scales = QuantScales::f32;
    QuantXRounding x_rounding = QuantXRounding::onnxruntime;
    bool row_groups = false;  // copied into QuantLayout::row_groups (needs q4 block 32 or q8 block 16 or 32, offset none or mins)
    bool six_bit_values = false;  // q8 integers in -32..31: with block 16, int8 scales and row_groups, q6 row groups
};

// Every size any op reads; each op reads the fields its label names (op_table.cpp builds them).
struct Shape {
    std::string label;
    // matmuls: x [n][k], w [m][k]; norms and add_bias: n rows of width k.
    int n = 1, k = 1, m = 1;
    QuantForm quant;
    // rope, kv_append, paged_attention
    int heads = 1, kv_heads = 1, head_dim = 8, rotary_dim = 0, block_size = 16;
    std::vector<int> lengths;  // paged_attention: cached positions per sequence
    std::vector<int> rows_of;  // paged_attention: rows per sequence (its last ones: decode 1, prefill more)
    int window = 0;
    float softcap = 0.0f;
    KvDtype kv_dtype = KvDtype::f32;
    // elementwise ops: length values; param: the op's parameter (cap, clamp bound, scale, layernorm's offset)
    int64_t length = 0;
    float param = 0.0f;
    bool in_place = false;    // out aliases an input
    bool misaligned = false;  // every buffer one element past a 16-byte boundary (the scalar paths)
};

// How a row's output is compared with its oracle (tolerances.cpp).
enum class Measure {
    bits,        // identical bits (a NaN matches a NaN): copies, adds, clamps, roundings
    max_scaled,  // max |got - want| <= value * max(1, max |want|)
    relative,    // |got - want| <= value * |want| + 1e-30, element by element
    bounded,     // |got - want| <= value * bound[i], bound from the op's error analysis
};

struct Tolerance {
    const char* op;
    Measure measure;
    double value;
    double device_value;  // for implementations with device_math
};

// The table's entry for op; throws kvx::Error for an op it does not list.
const Tolerance& tolerance_of(const std::string& op);

// The outcome of one comparison: pass, and the worst element when not.
struct Verdict {
    bool pass = true;
    std::string detail;  // "max error 3e-4 at 17 (bound 1e-5)", or what else failed
};

// got against want under op's tolerance for impl; bound (per element) only for Measure::bounded.
Verdict compare(const std::string& op, const Implementation& impl, const std::vector<float>& got,
                const std::vector<float>& want, const std::vector<double>& bound = {});

// Bits of got against want (NaN matches NaN), any element type: caches, bytes.
template <class T>
Verdict same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what);

// The first failure of several verdicts of one row (K and V caches, out and the pass-through), else a pass.
Verdict first_failure(std::initializer_list<Verdict> verdicts);

// The oracle's output of a row, computed by compute() once per (op, shape, seed) and reused by the
// implementations that follow (run_table runs a shape on each implementation in turn, with one seed). The
// reference sums in double; under the sanitizers it was 40% of paged_attention's time, once per implementation.
const std::vector<float>& oracle_once(const std::string& op, const Shape& shape, uint32_t seed,
                                      const std::function<std::vector<float>()>& compute);

// One op of the table: its shapes, and how to run a shape on an implementation and judge it.
struct Op {
    std::string name;  // also its tolerance's key
    std::vector<Shape> shapes;
    // Whether impl can run shape (false: the row is counted as not applicable, never as passed).
    bool (*applies)(const Implementation& impl, const Shape& shape);
    // Builds the shape's inputs from seed, runs impl and the oracle, compares.
    Verdict (*check)(const Implementation& impl, const Shape& shape, uint32_t seed);
    // The harness computes this op's oracle itself, so the reference kernel is held to it too.
    bool checks_reference = false;
};

// The table: every op of KernelTable with its shape sets (op_table.cpp).
const std::vector<Op>& op_table();

// Runs every (op, shape, implementation) row whose op name contains `filter` (empty: all; "!name": every op
// whose name does not contain name), prints each failure and a summary line, and returns the number of failed
// rows. Each op's inputs come from its own seeds, so a part of the table sees the inputs the whole table does.
int run_table(const std::vector<Implementation>& implementations, const std::string& filter);

}  // namespace kvx::ops
