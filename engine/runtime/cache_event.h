// What the engine just did to the KV cache, reported to an observer (kvx --verbose, tests). Where a contiguous
// cache would log the shapes of its past/present tensors at every step, a paged cache's equivalent is which
// sequence grew, shrank, forked or went, and what the pool holds afterwards.
#pragma once

#include <cstdint>

#include "engine/cache/kv_cache_manager.h"
#include "engine/cache/kv_cache_usage.h"

namespace kvx {

struct CacheEvent {
    enum class Kind { append, prefix_hit, fork, rewind, free };
    Kind kind = Kind::append;
    SeqId seq = -1;
    SeqId parent = -1;          // fork: the sequence whose blocks the new one shares
    int32_t length_before = 0;  // tokens the sequence held before the operation (fork: the parent's)
    int32_t length_after = 0;   // and after it (free: 0; prefix_hit: the cached tokens it starts with)
    int32_t copies = 0;         // append: copy-on-write block copies this append needed
    KvCacheUsage usage;         // the first layer group's pool after the operation (Engine::cache_usage())
};

const char* cache_event_name(CacheEvent::Kind kind);

}  // namespace kvx
