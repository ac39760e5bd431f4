#include "cache_report.h"

#include <cstdio>

namespace kvx::cli {

void print_cache_usage(const KvCacheUsage& u) {
    std::fprintf(stderr,
                 "kvx: KV cache %d of %d blocks of %d tokens, %zu of %zu bytes; %d shared, %d cached; %lld slots "
                 "wasted (%zu bytes)\n",
                 u.blocks_in_use, u.blocks_total, u.block_size, u.bytes_in_use(), u.bytes_total(), u.blocks_shared,
                 u.blocks_cached, static_cast<long long>(u.slots_wasted), u.bytes_wasted());
}

void print_cache_event(const CacheEvent& e) {
    const KvCacheUsage& u = e.usage;
    std::fprintf(stderr, "kvx: cache: %s seq %d", cache_event_name(e.kind), e.seq);
    switch (e.kind) {
        case CacheEvent::Kind::append:
            std::fprintf(stderr, " positions [%d, %d), %d copies", e.length_before, e.length_after, e.copies);
            break;
        case CacheEvent::Kind::prefix_hit:
            std::fprintf(stderr, " starts with %d cached tokens", e.length_after);
            break;
        case CacheEvent::Kind::fork:
            std::fprintf(stderr, " from seq %d at %d tokens", e.parent, e.length_after);
            break;
        case CacheEvent::Kind::rewind:
            std::fprintf(stderr, " %d -> %d tokens", e.length_before, e.length_after);
            break;
        case CacheEvent::Kind::free:
            std::fprintf(stderr, " (%d tokens)", e.length_before);
            break;
    }
    std::fprintf(stderr, "; blocks %d in use (%d shared), %d cached, %d free; %lld slots wasted\n", u.blocks_in_use,
                 u.blocks_shared, u.blocks_cached, u.blocks_free, static_cast<long long>(u.slots_wasted));
}

void log_cache_events(Engine& engine) { engine.set_cache_observer(print_cache_event); }

}  // namespace kvx::cli
