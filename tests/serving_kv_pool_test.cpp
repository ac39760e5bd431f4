// kvx serve's KV pool size (engine/serving/serving_kv_pool.h) against numbers worked out by hand from the cache
// layout ([num_blocks][n_kv_heads][block_size][head_dim] per layer, K and V): a 3-layer model with 2 KV heads
// of 16, blocks of 8 tokens, so a block of every layer is 2 (K, V) x 3 x 2 x 8 x 16 = 1536 elements:
// 6144 bytes in fp32, 3072 in fp16.
#include <catch2/catch.hpp>

#include "engine/serving/serving_kv_pool.h"
#include "kernels/error.h"

namespace kvx {
namespace {

ModelConfig three_layer_config() {
    ModelConfig c;
    c.traits = *find_architecture("llama");
    c.dim = 48;
    c.hidden_dim = 100;
    c.n_layers = 3;
    c.n_heads = 6;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 300;
    c.max_seq_len = 64;
    return c;
}

ServingKvPoolRequest request_of(int32_t context, int32_t max_seqs, KvDtype dtype = KvDtype::f32) {
    ServingKvPoolRequest r;
    r.context = context;
    r.block_size = 8;
    r.kv_dtype = dtype;
    r.max_seqs = max_seqs;
    return r;
}

TEST_CASE("a KV block's bytes count every layer's K and V", "[serving_kv_pool]") {
    CHECK(kv_block_bytes_all_layers(three_layer_config(), 8, KvDtype::f32) == 6144);
    CHECK(kv_block_bytes_all_layers(three_layer_config(), 8, KvDtype::f16) == 3072);
    CHECK(kv_block_bytes_all_layers(three_layer_config(), 16, KvDtype::f32) == 12288);
}

TEST_CASE("the serving pool is the blocks asked for, else what the memory asked for holds", "[serving_kv_pool]") {
    const ModelConfig c = three_layer_config();
    ServingKvPoolRequest r = request_of(64, 4);
    r.kv_blocks = 7;
    r.kv_memory = 100000;  // ignored: blocks win
    CHECK(serving_kv_pool_blocks(c, r) == 7);

    r.kv_blocks = 0;
    CHECK(serving_kv_pool_blocks(c, r) == 16);  // 100000 / 6144 = 16.3: whole blocks only
    r.kv_dtype = KvDtype::f16;
    CHECK(serving_kv_pool_blocks(c, r) == 32);  // 100000 / 3072 = 32.6

    r.kv_memory = 3071;  // less than one fp16 block
    CHECK_THROWS_WITH(serving_kv_pool_blocks(c, r), Catch::Contains("holds no KV block of 3072 bytes"));
}

TEST_CASE("the default serving pool holds max_seqs whole contexts within 1 GiB, and never less than one",
          "[serving_kv_pool]") {
    const ModelConfig c = three_layer_config();
    // A context of 64 tokens is 8 blocks, plus the scheduler's one more: 9 per sequence.
    CHECK(serving_kv_pool_blocks(c, request_of(64, 4)) == 36);
    CHECK(serving_kv_pool_blocks(c, request_of(60, 1)) == 9);  // 60 tokens still take 8 blocks
    // 1 GiB holds 2^30 / 6144 = 174762 blocks: 4 sequences of 2^20 tokens (131073 blocks each) are capped there.
    CHECK(serving_kv_pool_blocks(c, request_of(1 << 20, 4)) == 174762);
    // One sequence of 2^21 tokens (262145 blocks) is more than 1 GiB, and still what the pool gets.
    CHECK(serving_kv_pool_blocks(c, request_of(1 << 21, 4)) == 262145);
}

}  // namespace
}  // namespace kvx
