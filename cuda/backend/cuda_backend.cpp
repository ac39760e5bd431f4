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
    void norm(float* out, const float* in, const DeviceNorm& w, int n);
    void add_norm(float* out, float* residual, const float* delta, const DeviceNorm& w, int n);
    const float* block_input(const DeviceNorm& pre_norm, bool add_proj, int n);
    void block_output(float* out, const DeviceNorm& post_norm, int n);
    void attention_block(size_t layer, const StagedBatch& b, const StagingShape& shape,
                         const std::vector<AttentionPartitions>& partitions, const float* in, float* out);
    void mlp_block(const DeviceLayer& w, int n, const float* in, float* out);
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

void CudaBackend::State::norm(float* out, const float* in, const DeviceNorm& w, int n) {
    const ModelConfig& c = model.config;
    if (c.traits.norm == NormKind::rms)
        rmsnorm(out, in, w.weight, n, c.dim, c.norm_eps, stream);
    else
        layernorm(out, in, w.weight, w.bias, n, c.dim, c.norm_eps, stream);
}

// residual += delta, then out = norm(residual): the CPU's add then norm, in one pass.
void CudaBackend::State::add_norm(float* out, float* residual, const float* delta, const DeviceNorm& w, int n) {
    const ModelConfig& c = model.config;
    if (c.traits.norm == NormKind::rms)
        add_rmsnorm(out, residual, delta, w.weight, n, c.dim, c.norm_eps, stream);
    else
        add_layernorm(out, residual, delta, w.weight, w.bias, n, c.dim, c.norm_eps, stream);
}

// The input of the next block, with the previous block's output (waiting in proj when add_proj) joined to the
// residual stream x first: with pre-norms the two in one pass (add_norm, or norm alone for the first block)
// into xn; with post placement the block reads x itself, after a plain add.
const float* CudaBackend::State::block_input(const DeviceNorm& pre_norm, bool add_proj, int n) {
    const ModelConfig& c = model.config;
    if (!c.pre_norms()) {
        if (add_proj) add(x.data(), proj.data(), int64_t{n} * c.dim, stream);
        return x.data();
    }
    if (add_proj)
        add_norm(xn.data(), x.data(), proj.data(), pre_norm, n);
    else
        norm(xn.data(), x.data(), pre_norm, n);
    return xn.data();
}

// A block's output on its way to the residual stream: its post-norm (sandwich and post placements), then the
// residual scale (skipped at 1). The CPU backend's block_output.
void CudaBackend::State::block_output(float* out, const DeviceNorm& post_norm, int n) {
    const ModelConfig& c = model.config;
    if (c.post_norms()) norm(out, out, post_norm, n);
    if (c.residual_scale != 1.0f) scale(out, int64_t{n} * c.dim, c.residual_scale, stream);
}

// out [n][dim] = the attention block's output for the residual stream, from the block's input `in`: q, k, v
// (clamped where the model clips them, then RMS-normed per head or per projection where it says), RoPE with
// the layer's table over the rotated dims, the new K/V appended, paged attention (soft-capped where the plan
// says), wo, and block_output's post-norm and scale. The CPU backend's attention_block, launch for launch.
void CudaBackend::State::attention_block(size_t layer, const StagedBatch& b, const StagingShape& shape,
                                         const std::vector<AttentionPartitions>& partitions, const float* in,
                                         float* out) {
    const ModelConfig& c = model.config;
    const DeviceLayer& w = weights.layers[layer];
    const int n = shape.n_rows;
    linear(q.data(), in, w.wq, n);
    linear(k.data(), in, w.wk, n);
    linear(v.data(), in, w.wv, n);
    if (c.clip_qkv > 0) {
        clamp(q.data(), int64_t{n} * c.q_dim(), c.clip_qkv, stream);
        clamp(k.data(), int64_t{n} * c.kv_dim(), c.clip_qkv, stream);
        clamp(v.data(), int64_t{n} * c.kv_dim(), c.clip_qkv, stream);
    }
    if (c.qk_norm != QkNorm::none) {  // rows of q_norm_width(), in place: a head each, or a whole projection each
        const int q_rows = n * (c.q_dim() / c.q_norm_width()), k_rows = n * (c.kv_dim() / c.k_norm_width());
        rmsnorm(q.data(), q.data(), w.q_norm.weight, q_rows, c.q_norm_width(), c.norm_eps, stream);
        rmsnorm(k.data(), k.data(), w.k_norm.weight, k_rows, c.k_norm_width(), c.norm_eps, stream);
    }
    if (c.traits.rotary()) {
        const bool local = std::binary_search(c.rope_local_layers.begin(), c.rope_local_layers.end(), static_cast<int>(layer));
        const float* cos = local ? rope_cos_local.data() : rope_cos.data();
        const float* sin = local ? rope_sin_local.data() : rope_sin.data();
        rope(q.data(), cos, sin, n, c.n_heads, c.head_dim, c.rotated_dims(), stream);
        rope(k.data(), cos, sin, n, c.n_kv_heads, c.head_dim, c.rotated_dims(), stream);
    }
    const KvLayout& kv = plan->kv();
    const size_t g = kv.layer_group[layer];
    kv_append(k_cache[layer].data(), v_cache[layer].data(), kv.dtype, k.data(), v.data(), b.slots[g], n, c.n_kv_heads,
              c.head_dim, kv.block_size, stream);

    PagedAttentionArgs a = plan->attention_args(layer, shape.table_strides[g]);  // scale and soft-cap included
    a.q = q.data();
    a.k_cache = k_cache[layer].data();
    a.v_cache = v_cache[layer].data();
    a.block_tables = b.block_tables[g];
    a.row_seq = b.row_seq;
    a.row_pos = b.positions;
    a.out = att.data();
    a.n_rows = n;
    paged_attention(a, b.tiles, shape.n_tiles, partitions[g], attention_workspace.data(), stream);
    linear(out, att.data(), w.wo, n);
    block_output(out, w.post_attn_norm, n);
}

// out [n][dim] = the MLP block's output from the block's input `in`, and block_output's post-norm and scale.
// The CPU backend's mlp_block.
void CudaBackend::State::mlp_block(const DeviceLayer& w, int n, const float* in, float* out) {
    const ModelConfig& c = model.config;
    const int64_t inner = int64_t{n} * c.hidden_dim;
    switch (c.traits.mlp) {
    case MlpKind::swiglu:
        linear(up.data(), in, w.w_up, n);
        linear(gate.data(), in, w.w_gate, n);
        swiglu(up.data(), gate.data(), up.data(), inner, stream);
        break;
    case MlpKind::geglu_tanh:
        linear(up.data(), in, w.w_up, n);
        linear(gate.data(), in, w.w_gate, n);
        geglu_tanh(up.data(), gate.data(), up.data(), inner, stream);
        break;
    case MlpKind::gelu_tanh:
        linear(up.data(), in, w.w_up, n);
        gelu_tanh(up.data(), up.data(), inner, stream);
        break;
    case MlpKind::gelu_erf:
        linear(up.data(), in, w.w_up, n);
        gelu_erf(up.data(), up.data(), inner, stream);
        break;
    }
    linear(out, up.data(), w.w_down, n);
    block_output(out, w.post_ffn_norm, n);
}

// The whole pass, every launch on `stream` and every address fixed by the shape and the generation, so
// that it can be captured as one graph. The CPU backend's forward with the residual adds fused into the
// next norm: a block's output waits in proj and joins x in the add_norm before the next block (block_input;
// a plain add where the layers have no pre-norms, and before the final norm).
void CudaBackend::State::enqueue_forward(const StagedBatch& b, const StagingShape& shape,
                                                const std::vector<AttentionPartitions>& partitions) {
    const ModelConfig& c = model.config;
    const ArchitectureTraits& t = c.traits;
    const int n = shape.n_rows;
    const int64_t width = int64_t{n} * c.dim;
    embed_tokens(b, n);
    if (t.rotary()) {
        const int half = c.rotated_dims() / 2;
        rope_tables(rope_cos.data(), rope_sin.data(), b.positions, weights.rope_inv_freq, n, half, stream);
        if (weights.rope_inv_freq_local)
            rope_tables(rope_cos_local.data(), rope_sin_local.data(), b.positions, weights.rope_inv_freq_local, n,
                        half, stream);
    }

    for (size_t layer = 0; layer < weights.layers.size(); ++layer) {
        const DeviceLayer& w = weights.layers[layer];
        // The previous layer's output joins the residual stream, with pre-norms in the same pass as this norm.
        const float* in = block_input(w.attn_norm, layer > 0, n);
        if (c.parallel_residual) {
            // x + (mlp(ffn_norm(x)) + attn(attn_norm(x))), HF GPT-NeoX's order of adds: both norms of the same
            // x, the sum of the two outputs joining x at the next block_input.
            attention_block(layer, b, shape, partitions, in, attn_out.data());
            mlp_block(w, n, block_input(w.ffn_norm, false, n), proj.data());
            add(proj.data(), attn_out.data(), width, stream);
            continue;
        }
        attention_block(layer, b, shape, partitions, in, proj.data());
        mlp_block(w, n, block_input(w.ffn_norm, true, n), proj.data());
    }
    add(x.data(), proj.data(), width, stream);

    // Only the rows whose logits are wanted go through the final norm and the classifier (and its bias), then
    // the logit scale and soft-cap.
    const int n_out = shape.n_logit_rows;
    const int64_t n_logits = int64_t{n_out} * c.vocab_size;
    gather_rows(proj.data(), x.data(), b.logit_rows, n_out, c.dim, stream);
    norm(xn.data(), proj.data(), weights.final_norm, n_out);
    linear(logits.data(), xn.data(), DeviceLinear{weights.classifier, weights.classifier_bias}, n_out);
    if (c.logit_scale != 1.0f) scale(logits.data(), n_logits, c.logit_scale, stream);
    if (c.final_logit_softcap > 0) softcap(logits.data(), n_logits, c.final_logit_softcap, stream);
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
