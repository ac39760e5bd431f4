// The DecoderPlan both backends read, against sizes worked out by hand from the cache layout kernels.h
// defines ([num_blocks][n_kv_heads][block_size][head_dim] per layer): a windowed Llama-family model and a
// GPT-2-family one.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>

#include "engine/runtime/decoder_plan.h"
#include "kernels/error.h"

namespace kvx {
namespace {

ModelConfig config_of(std::string_view architecture) {
    ModelConfig c;
    c.traits = *find_architecture(architecture);
    c.dim = 48;
    c.hidden_dim = 100;
    c.n_layers = 3;
    c.n_heads = 6;
    c.n_kv_heads = 2;
    c.head_dim = 16;  // q_dim 96 > dim: the widest matmul input is the hidden width
    c.vocab_size = 300;
    c.max_seq_len = 64;
    return c;
}

// Layer 1 attends to everything; layers 0 and 2 to a window of 7.
std::vector<LayerGroupSpec> windowed_groups() { return {{0, 10, {1}}, {7, 4, {0, 2}}}; }

TEST_CASE("the plan lays out every layer's KV pool in its group and prices a block per group", "[plan]") {
    for (KvDtype dtype : {KvDtype::f32, KvDtype::f16}) {
        const DecoderPlan plan(config_of("llama"), windowed_groups(), 8, dtype);
        const KvLayout& kv = plan.kv();
        const size_t elem = dtype == KvDtype::f16 ? 2 : 4;
        INFO("element bytes " << elem);
        CHECK(kv.elem_bytes() == elem);
        CHECK(kv.layer_group == std::vector<size_t>{1, 0, 1});
        CHECK(kv.block_elems() == size_t{2} * 8 * 16);                   // kv heads x block size x head_dim
        CHECK(kv.layer_pool_bytes(0) == size_t{4} * 2 * 8 * 16 * elem);  // the windowed group's 4 blocks
        CHECK(kv.layer_pool_bytes(1) == size_t{10} * 2 * 8 * 16 * elem); // the full group's 10
        CHECK(kv.bytes_per_block(0) == 2 * size_t{1} * 2 * 8 * 16 * elem);  // K and V of one layer
        CHECK(kv.bytes_per_block(1) == 2 * size_t{2} * 2 * 8 * 16 * elem);  // K and V of two layers
    }
}

TEST_CASE("the plan's activation widths follow the family's traits", "[plan]") {
    const DecoderPlan llama(config_of("llama"), windowed_groups(), 8, KvDtype::f32);
    CHECK(llama.widths().residual == 48);
    CHECK(llama.widths().q == 96);
    CHECK(llama.widths().kv == 32);
    CHECK(llama.widths().hidden == 100);
    CHECK(llama.widths().gate == 100);  // SwiGLU is gated
    CHECK(llama.widths().rope == 8);    // rotary: head_dim / 2
    CHECK(llama.widths().widest_input == 100);
    CHECK(llama.widths().logits == 300);

    ModelConfig gpt2 = config_of("gpt2");
    gpt2.hidden_dim = 40;  // now q_dim (96) is the widest matmul input
    const DecoderPlan plan(gpt2, {{0, 10, {0, 1, 2}}}, 8, KvDtype::f32);
    CHECK(plan.widths().gate == 0);  // GELU MLP: no gate
    CHECK(plan.widths().rope == 0);  // learned positions: no rotary tables
    CHECK(plan.widths().widest_input == 96);
}

TEST_CASE("the plan fills each layer's attention arguments with its group's window", "[plan]") {
    const DecoderPlan plan(config_of("llama"), windowed_groups(), 8, KvDtype::f16);
    for (size_t layer = 0; layer < 3; ++layer) {
        const PagedAttentionArgs a = plan.attention_args(layer, 5);
        INFO("layer " << layer);
        CHECK(a.window == (layer == 1 ? 0 : 7));
        CHECK(a.n_heads == 6);
        CHECK(a.n_kv_heads == 2);
        CHECK(a.head_dim == 16);
        CHECK(a.block_size == 8);
        CHECK(a.table_stride == 5);
        CHECK(a.kv_dtype == KvDtype::f16);
        CHECK(a.scale == 1.0f / std::sqrt(16.0f));
        CHECK(a.q == nullptr);  // pointers are the backend's
        CHECK(a.n_rows == 0);
    }
}

TEST_CASE("a plan refuses groups that leave a layer out, and a backend's batch of other groups", "[plan]") {
    CHECK_THROWS_AS(DecoderPlan(config_of("llama"), {{0, 10, {0, 2}}}, 8, KvDtype::f32), Error);
    const std::optional<DecoderPlan> none;
    ForwardBatch batch;
    batch.groups.resize(1);
    CHECK_THROWS_WITH(plan_for(none, batch), Catch::Matchers::Contains("forward before allocate_kv"));
    const std::optional<DecoderPlan> plan(DecoderPlan(config_of("llama"), windowed_groups(), 8, KvDtype::f32));
    CHECK_THROWS_WITH(plan_for(plan, batch), Catch::Matchers::Contains("layer groups"));
    batch.groups.resize(2);
    CHECK(&plan_for(plan, batch) == &*plan);
}

}  // namespace
}  // namespace kvx
