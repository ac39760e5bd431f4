// The KV cache as the CLI reports it on stderr: the pool's usage after a run, and with --verbose every
// cache operation as it happens.
#pragma once

#include "engine/cache/kv_cache_usage.h"
#include "engine/runtime/cache_event.h"
#include "engine/runtime/engine.h"

namespace kvx::cli {

// "kvx: KV cache 6 of 128 blocks of 16 tokens, 393216 of 8388608 bytes; 1 shared, 2 cached; 10 slots wasted
// (245760 bytes)"
void print_cache_usage(const KvCacheUsage& usage);

// One line per operation: "kvx: cache: append seq 0 [37, 38), 0 copies; 3 blocks in use (1 shared), ..."
void print_cache_event(const CacheEvent& event);

// Makes the engine print every cache operation (--verbose).
void log_cache_events(Engine& engine);

}  // namespace kvx::cli
