#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <optional>

#include "cuda/backend/batch_staging.h"
#include "cuda/backend/blas.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/graph_cache.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_probe.h"
#include "engine/runtime/forward_recipe.h"
#include "kernels/error.h"

namespace kvx::cuda {
namespace {

// The attention workspace (split-K partials) is bounded: a launch gets as many partitions as fit.
constexpr size_t kAttentionWorkspaceBudgetFloats = size_t{32} << 20;  // 128 MiB

// Block tables are widened to a power of two (at least this) so that a CUDA graph serves every step until
// the longest sequence crosses the next power of two.
constexpr int32_t kMinTableBucket = 8;

int32_t table_bucket(int32_t stride) {
    return std::max(kMinTableBucket, static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(std::max(stride, 1)))));
}

// The backend's one stream. Declared first in State, so destroyed last: cuBLAS's handle and the graphs
// still refer to it while they go.
class OwnedStream {
public:
    OwnedStream() {
        const std::string why = unavailable_reason();
        if (!why.empty()) throw Error("--device cuda: " + why);
        check(cudaSetDevice(0), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~OwnedStream() { cudaStreamDestroy(stream_); }
    OwnedStream(const OwnedStream&) = delete;
    OwnedStream& operator=(const OwnedStream&) = delete;
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

}  // namespace

struct CudaBackend::State {
    State(const Model& m, const CudaBackendOptions& o)
        : owned_stream(), model(m), options(o), stream(owned_stream.get()), weights(m), blas(stream),
          dequantized(weights.largest_quantized_elements()) {
        check(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    }
    ~State() { cudaStreamSynchronize(stream); }  // no buffer is freed under a kernel still running

    OwnedStream owned_stream;
    const Model& model;
    const CudaBackendOptions options;
    cudaStream_t stream;  // every launch and copy of this backend, in order
    DeviceWeights weights;
    Blas blas;
    // [rows][cols] fp16 of the quantized matrix a prefill multiplies now: every quantized matrix is dequantized
    // into it just before its cublasGemmEx (stream order keeps one product's weights from the next's), so the
    // model stays at its quantized size on the device. Sized once, for the largest; empty without any.
    DeviceBuffer<uint16_t> dequantized;
    int sm_count = 0;

    // Set by allocate_kv. KV pools: a layer's K/V live in its group's pool, [num_blocks][n_kv_heads]
    // [block_size][head_dim] of the plan's KV dtype each.
    std::optional<DecoderPlan> plan;
    std::vector<DeviceBuffer<std::byte>> k_cache, v_cache;  // [n_layers]
    DeviceBuffer<BlockCopy> copy_pairs;                     // [pairs of one copy_blocks call]

    // Activations, grown to the largest batch seen (growth moves them: generation changes).
    int32_t scratch_rows = 0;
    DeviceBuffer<float> x, xn, q, k, v, att, gate, up, proj;  // [rows][dim | q_dim | kv_dim | hidden_dim]
    DeviceBuffer<float> attn_out;                             // [rows][dim] parallel residual only
    DeviceBuffer<float> rope_cos, rope_sin;                   // [rows][rotary_dim / 2]
    DeviceBuffer<float> rope_cos_local, rope_sin_local;       // [rows][rotary_dim / 2] rope_local_layers only
    DeviceBuffer<uint16_t> x_f16;                             // [rows][widest input] fp16 copy for GemmEx
    DeviceBuffer<float> logits;                               // [rows][vocab_size]
    DeviceBuffer<float> attention_workspace;                  // [attention_workspace_floats(...)]
    uint64_t scratch_generation = 0;

    BatchStaging staging;
    GraphCache graphs;
    DeviceBuffer<int32_t> picked;           // [1] the token forward_sample picked
    DeviceBuffer<std::byte> sample_scratch; // [sampling_scratch_bytes(vocab_size)]

    void ensure_scratch(int32_t rows, size_t workspace_floats);
    void linear(float* out, const float* in, const DeviceLinear& l, int n);
    void quantized_linear(float* out, const float* in, const DeviceLinear& l, int n);
    void embed_tokens(const StagedBatch& b, int n);
    class PassOps;  // the forward recipe's ops as launches on this state's stream
    void run_pass(const ForwardBatch& batch);  // enqueues the pass; its logits end in `logits`
    void enqueue_forward(const StagedBatch& b, const StagingShape& shape,
                         const std::vector<AttentionPartitions>& partitions);
};

void CudaBackend::State::ensure_scratch(int32_t rows, size_t workspace_floats) {
    if (workspace_floats > attention_workspace.size()) {
        attention_workspace.resize(std::max(workspace_floats, attention_workspace.size() * 2));
        ++scratch_generation;
    }
    if (rows <= scratch_rows) return;
    const ActivationWidths& w = plan->widths();
    const auto n = static_cast<size_t>(std::max(rows, 2 * scratch_rows));
    x.resize(n * w.residual);
    xn.resize(n * w.residual);
    q.resize(n * w.q);
    k.resize(n * w.kv);
    v.resize(n * w.kv);
    att.resize(n * w.q);
    gate.resize(n * w.gate);
    up.resize(n * w.hidden);
    proj.resize(n * w.residual);
    attn_out.resize(n * w.attn_out);
    rope_cos.resize(n * w.rope);
    rope_sin.resize(n * w.rope);
    rope_cos_local.resize(n * w.rope_local);
    rope_sin_local.resize(n * w.rope_local);
    x_f16.resize(n * w.widest_input);
    logits.resize(n * w.logits);
    scratch_rows = static_cast<int32_t>(n);
    ++scratch_generation;
}

// out [n][rows] = in [n][cols] . weight^T (+ bias): the GEMV for decode-sized batches, cuBLAS beyond.
void CudaBackend::State::linear(float* out, const float* in, const DeviceLinear& l, int n) {
    const DeviceMatrix& w = l.weight;
    if (w.quantized) return quantized_linear(out, in, l, n);
    if (options.hand_gemv && n <= kGemvMaxRows) {
        if (w.f16)
            gemv_f16(out, in, static_cast<const uint16_t*>(w.data), l.bias, n, w.cols, w.rows, stream);
        else
            gemv_f32(out, in, static_cast<const float*>(w.data), l.bias, n, w.cols, w.rows, stream);
        return;
    }
    if (w.f16)
        blas.matmul_f16(out, in, static_cast<const uint16_t*>(w.data), x_f16.data(), n, w.cols, w.rows);
    else
        blas.matmul_f32(out, in, static_cast<const float*>(w.data), n, w.cols, w.rows);
    if (l.bias) add_bias(out, l.bias, n, w.rows, stream);
}

// linear() for q8 / q4 weights: the quantized GEMV for decode-sized batches; beyond, the matrix dequantized
// to fp16 into the scratch and multiplied by cublasGemmEx like an fp16 matrix (docs/cuda.md, "Quantized weights").
void CudaBackend::State::quantized_linear(float* out, const float* in, const DeviceLinear& l, int n) {
    const DeviceMatrix& w = l.weight;
    if (options.hand_gemv && n <= kGemvMaxRows) {
        gemv_quant(out, in, w.quant, l.bias, n, w.cols, w.rows, stream);
        return;
    }
    dequantize_f16(dequantized.data(), w.quant, w.rows, w.cols, stream);
    blas.matmul_f16(out, in, dequantized.data(), x_f16.data(), n, w.cols, w.rows);
    if (l.bias) add_bias(out, l.bias, n, w.rows, stream);
}

// x [n][dim] = the tokens' embeddings times the embedding scale (+ their positions' embeddings), as the CPU
// backend's embed: one kernel where neither table is quantized; else a quantized table's rows are dequantized
// (dequantize_rows), and an fp32 / fp16 position table beside a quantized token table is gathered into proj
// (free until the first block) and added.
void CudaBackend::State::embed_tokens(const StagedBatch& b, int n) {
    const ModelConfig& c = model.config;
    const DeviceMatrix& tok = weights.tok_embeddings;
    const DeviceMatrix* pos = c.traits.learned_positions() ? &weights.pos_embeddings : nullptr;
    if (!tok.quantized) {
        const bool pos_in_embed = pos && !pos->quantized;
        embed(x.data(), b.tokens, tok.data, tok.f16, c.embedding_scale, pos_in_embed ? pos->data : nullptr,
              pos_in_embed && pos->f16, b.positions, n, c.dim, stream);
    } else {
        dequantize_rows(x.data(), b.tokens, tok.quant, n, c.dim, c.embedding_scale, false, stream);
        if (pos && !pos->quantized) {
            embed(proj.data(), b.positions, pos->data, pos->f16, 1.0f, nullptr, false, nullptr, n, c.dim, stream);
            add(x.data(), proj.data(), int64_t{n} * c.dim, stream);
        }
    }
    if (pos && pos->quantized) dequantize_rows(x.data(), b.positions, pos->quant, n, c.dim, 1.0f, true, stream);
}

// The recipe's ops (engine/runtime/forward_recipe.h) on the device: launches on the backend's stream, on its
// device weights and KV pools, for one staged batch.
class CudaBackend::State::PassOps {
public:
    using Linear = DeviceLinear;
    struct LinearOutput {
        float* out;           // [n][layer.weight.rows], device
        const Linear& layer;
    };

    PassOps(CudaBackend::State& s, const StagedBatch& b, const StagingShape& shape,
            const std::vector<AttentionPartitions>& partitions)
        : s_(s), c_(s.model.config), stream_(s.stream), b_(b), shape_(shape), partitions_(partitions) {}

    const DeviceLayer& layer(int l) const { return s_.weights.layers[static_cast<size_t>(l)]; }
    const DeviceNorm& final_norm() const { return s_.weights.final_norm; }
    Linear classifier() const { return {s_.weights.classifier, s_.weights.classifier_bias}; }

    // One product per output: a GEMV launch each for decode-sized batches, cuBLAS beyond.
    void linears(std::initializer_list<LinearOutput> group, const float* x, int n) {
        for (const LinearOutput& o : group) s_.linear(o.out, x, o.layer, n);
    }

    void norm(float* out, const float* x, const DeviceNorm& w, int n) {
        if (c_.traits.norm == NormKind::rms)
            cuda::rmsnorm(out, x, w.weight, n, c_.dim, c_.norm_eps, stream_);
        else
            cuda::layernorm(out, x, w.weight, w.bias, n, c_.dim, c_.norm_eps, stream_);
    }
    // x += y and out = norm(x) in one pass over x.
    void add_norm(float* out, float* x, const float* y, const DeviceNorm& w, int n) {
        if (c_.traits.norm == NormKind::rms)
            cuda::add_rmsnorm(out, x, y, w.weight, n, c_.dim, c_.norm_eps, stream_);
        else
            cuda::add_layernorm(out, x, y, w.weight, w.bias, n, c_.dim, c_.norm_eps, stream_);
    }

    // The layer's new K/V (buffers k, v) into its group's pool at the staged slots, then paged attention of q
    // into att over the staged tiles, split into the group's partitions.
    void attention(int layer, int n) {
        const size_t l = static_cast<size_t>(layer);
        const KvLayout& kv = s_.plan->kv();
        const size_t g = kv.layer_group[l];
        cuda::kv_append(s_.k_cache[l].data(), s_.v_cache[l].data(), kv.dtype, s_.k.data(), s_.v.data(), b_.slots[g], n,
                        c_.n_kv_heads, c_.head_dim, kv.block_size, stream_);
        PagedAttentionArgs a = s_.plan->attention_args(l, shape_.table_strides[g]);  // scale and soft-cap included
        a.q = s_.q.data();
        a.k_cache = s_.k_cache[l].data();
        a.v_cache = s_.v_cache[l].data();
        a.block_tables = b_.block_tables[g];
        a.row_seq = b_.row_seq;
        a.row_pos = b_.positions;
        a.out = s_.att.data();
        a.n_rows = n;
        cuda::paged_attention(a, b_.tiles, shape_.n_tiles, partitions_[g], s_.attention_workspace.data(), stream_);
    }

    void gather_logit_rows(float* out, const float* x, int n_out) {
        cuda::gather_rows(out, x, b_.logit_rows, n_out, c_.dim, stream_);
    }

    void rmsnorm(float* out, const float* x, const float* w, int n, int d, float eps) {
        cuda::rmsnorm(out, x, w, n, d, eps, stream_);
    }
    void clamp(float* x, int64_t n, float c) { cuda::clamp(x, n, c, stream_); }
    void rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim, int rotary_dim) {
        cuda::rope(x, cos, sin, n_rows, n_heads, head_dim, rotary_dim, stream_);
    }
    void swiglu(float* out, const float* gate, const float* up, int64_t n) { cuda::swiglu(out, gate, up, n, stream_); }
    void geglu_tanh(float* out, const float* gate, const float* up, int64_t n) {
        cuda::geglu_tanh(out, gate, up, n, stream_);
    }
    void gelu_tanh(float* out, const float* x, int64_t n) { cuda::gelu_tanh(out, x, n, stream_); }
    void gelu_erf(float* out, const float* x, int64_t n) { cuda::gelu_erf(out, x, n, stream_); }
    void scale(float* x, int64_t n, float s) { cuda::scale(x, n, s, stream_); }
    void add(float* x, const float* y, int64_t n) { cuda::add(x, y, n, stream_); }
    void softcap(float* x, int64_t n, float cap) { cuda::softcap(x, n, cap, stream_); }

private:
    CudaBackend::State& s_;
    const ModelConfig& c_;
    cudaStream_t stream_;
    const StagedBatch& b_;
    const StagingShape& shape_;
    const std::vector<AttentionPartitions>& partitions_;
};

// The whole pass, every launch on `stream` and every address fixed by the shape and the generation, so
// that it can be captured as one graph: the embeddings and RoPE tables, then the forward recipe.
void CudaBackend::State::enqueue_forward(const StagedBatch& b, const StagingShape& shape,
                                         const std::vector<AttentionPartitions>& partitions) {
    const ModelConfig& c = model.config;
    const int n = shape.n_rows;
    embed_tokens(b, n);
    if (c.traits.rotary()) {
        const int half = c.rotated_dims() / 2;
        rope_tables(rope_cos.data(), rope_sin.data(), b.positions, weights.rope_inv_freq, n, half, stream);
        if (weights.rope_inv_freq_local)
            rope_tables(rope_cos_local.data(), rope_sin_local.data(), b.positions, weights.rope_inv_freq_local, n,
                        half, stream);
    }
    ForwardBuffers buffers;
    buffers.x = x.data();
    buffers.xn = xn.data();
    buffers.q = q.data();
    buffers.k = k.data();
    buffers.v = v.data();
    buffers.att = att.data();
    buffers.gate = gate.data();
    buffers.up = up.data();
    buffers.proj = proj.data();
    buffers.attn_out = attn_out.data();
    buffers.rope_cos = rope_cos.data();
    buffers.rope_sin = rope_sin.data();
    buffers.rope_cos_local = rope_cos_local.data();
    buffers.rope_sin_local = rope_sin_local.data();
    PassOps ops(*this, b, shape, partitions);
    run_forward_recipe(ops, c, buffers, n, shape.n_logit_rows, logits.data());
}

CudaBackend::CudaBackend(const Model& model, const CudaBackendOptions& options) {
    const ModelConfig& c = model.config;
    if (c.head_dim > kMaxHeadDim)
        throw Error("--device cuda: head_dim " + std::to_string(c.head_dim) + " is beyond the CUDA attention kernel's " +
                    std::to_string(kMaxHeadDim));
    state_ = std::make_unique<State>(model, options);
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::name() const { return "cuda"; }

void CudaBackend::allocate_kv(const DecoderPlan& plan) {
    State& s = *state_;
    const KvLayout& kv = plan.kv();
    s.k_cache.clear();
    s.v_cache.clear();
    for (size_t layer = 0; layer < kv.layer_group.size(); ++layer) {
        try {
            s.k_cache.emplace_back(kv.layer_pool_bytes(layer));
            s.v_cache.emplace_back(kv.layer_pool_bytes(layer));
        } catch (const Error& e) {
            s.k_cache.clear();
            s.v_cache.clear();
            const size_t g = kv.layer_group[layer];
            throw Error("cannot allocate the KV cache on the GPU: " + std::to_string(kv.groups[g].num_blocks) +
                        " blocks of " + std::to_string(kv.bytes_per_block(g)) + " bytes per layer group (lower -c): " +
                        e.what());
        }
    }
    s.plan = plan;
    s.graphs.clear();
}

// As on the host: each group's copies in its own layers. The pairs travel once per group.
void CudaBackend::copy_blocks(std::span<const std::vector<BlockCopy>> copies) {
    State& s = *state_;
    const KvLayout& kv = s.plan.value().kv();
    for (size_t g = 0; g < copies.size(); ++g) {
        const std::vector<BlockCopy>& mine = copies[g];
        if (mine.empty()) continue;
        s.copy_pairs.reserve(mine.size());
        check(cudaMemcpyAsync(s.copy_pairs.data(), mine.data(), mine.size() * sizeof(BlockCopy), cudaMemcpyHostToDevice,
                              s.stream),
              "cudaMemcpyAsync (block copies)");
        for (size_t layer = 0; layer < s.k_cache.size(); ++layer)
            if (kv.layer_group[layer] == g)
                cuda::copy_blocks(s.k_cache[layer].data(), s.v_cache[layer].data(), s.copy_pairs.data(),
                                  static_cast<int>(mine.size()), static_cast<int64_t>(kv.block_elems()),
                                  static_cast<int>(kv.elem_bytes()), s.stream);
        // The pairs buffer is reused by the next group: its copy must not overtake these kernels.
        check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize (block copies)");
    }
}

void CudaBackend::forward(const ForwardBatch& batch, float* logits_out) {
    State& s = *state_;
    s.run_pass(batch);
    const size_t logit_bytes = batch.logit_rows.size() * static_cast<size_t>(s.model.config.vocab_size) * sizeof(float);
    if (logit_bytes)
        check(cudaMemcpyAsync(logits_out, s.logits.data(), logit_bytes, cudaMemcpyDeviceToHost, s.stream),
              "cudaMemcpyAsync (logits)");
    check(cudaStreamSynchronize(s.stream), "the forward pass on the GPU");
}

bool CudaBackend::can_sample(const SamplerOptions& options) const {
    return options.temperature == 0.0f || (options.top_k >= 1 && options.top_k <= kMaxDeviceTopK);
}

int32_t CudaBackend::forward_sample(const ForwardBatch& batch, const SamplerOptions& options, double uniform) {
    State& s = *state_;
    if (batch.logit_rows.size() != 1 || !can_sample(options))
        throw Error("internal: forward_sample needs one logit row and options the device can sample with");
    const int vocab = s.model.config.vocab_size;
    s.run_pass(batch);
    s.picked.reserve(1);
    if (options.temperature == 0.0f) {
        argmax(s.picked.data(), s.logits.data(), 1, vocab, s.stream);
    } else {
        s.sample_scratch.reserve(sampling_scratch_bytes(vocab));
        sample_top_k_top_p(s.picked.data(), s.logits.data(), vocab, options.temperature, options.top_k, options.top_p,
                           uniform, s.sample_scratch.data(), s.stream);
    }
    int32_t token = 0;
    check(cudaMemcpyAsync(&token, s.picked.data(), sizeof token, cudaMemcpyDeviceToHost, s.stream), "cudaMemcpyAsync (token)");
    check(cudaStreamSynchronize(s.stream), "the forward pass on the GPU");
    return token;
}

void CudaBackend::State::run_pass(const ForwardBatch& batch) {
    const KvLayout& kv = plan_for(plan, batch).kv();
    const ModelConfig& c = model.config;
    const int32_t n = batch.n_rows();
    if (n == 0) return;

    const std::vector<AttentionTile> tiles = plan_attention_tiles(batch.row_seq, c.n_heads / c.n_kv_heads);
    StagingShape shape;
    shape.n_rows = n;
    shape.n_logit_rows = static_cast<int32_t>(batch.logit_rows.size());
    shape.n_tiles = static_cast<int32_t>(tiles.size());
    const GroupRows& first = batch.groups.front();
    shape.n_seqs = first.table_stride > 0 ? static_cast<int32_t>(first.block_tables.size()) / first.table_stride : 0;

    // Partitions are planned for what the widened tables can hold, not for this step's lengths, so that a
    // graph captured now stays right for every step of its shape.
    std::vector<AttentionPartitions> partitions;
    const size_t per_partition = attention_workspace_floats(n, c.n_heads, c.head_dim, 2) / 2;
    const int max_partitions = static_cast<int>(std::clamp<size_t>(kAttentionWorkspaceBudgetFloats / per_partition, 1, 1024));
    size_t workspace_floats = 0;
    for (size_t g = 0; g < batch.groups.size(); ++g) {
        const int32_t stride = table_bucket(batch.groups[g].table_stride);
        shape.table_strides.push_back(stride);
        int max_span = stride * kv.block_size;
        if (kv.groups[g].window > 0) max_span = std::min(max_span, kv.groups[g].window + n);
        partitions.push_back(plan_attention_partitions(shape.n_tiles, c.n_kv_heads, max_span, sm_count, max_partitions));
        workspace_floats = std::max(workspace_floats,
                                    attention_workspace_floats(n, c.n_heads, c.head_dim, partitions.back().n_partitions));
    }

    ensure_scratch(n, workspace_floats);
    const StagedBatch staged = staging.stage(batch, tiles, shape, stream);
    const uint64_t generation = (scratch_generation << 32) | staging.generation();
    auto enqueue = [&] { enqueue_forward(staged, shape, partitions); };
    if (options.cuda_graphs)
        graphs.run(shape, generation, stream, enqueue);
    else
        enqueue();
}

size_t CudaBackend::weight_bytes() const { return state_->weights.bytes_read_per_step(); }

size_t CudaBackend::kv_pool_bytes() const {
    size_t bytes = 0;
    for (const auto& b : state_->k_cache) bytes += 2 * b.bytes();
    return bytes;
}

int64_t CudaBackend::graph_replays() const { return state_->graphs.replays(); }
int64_t CudaBackend::graph_captures() const { return state_->graphs.captures(); }

}  // namespace kvx::cuda
