// A new sequence of an engine's that is freed when the guard leaves scope, by return or by throw: what a
// loop that runs one sequence to the end (generate, perplexity's chunks, position_logits) holds it in, so
// that an error leaves the pool with the blocks it had before.
#pragma once

#include "engine/runtime/engine.h"

namespace kvx {

class SequenceGuard {
public:
    explicit SequenceGuard(Engine& engine) : engine_(engine), seq_(engine.new_sequence()) {}
    ~SequenceGuard() { engine_.free_sequence(seq_); }
    SequenceGuard(const SequenceGuard&) = delete;
    SequenceGuard& operator=(const SequenceGuard&) = delete;

    SeqId id() const { return seq_; }

private:
    Engine& engine_;
    const SeqId seq_;
};

}  // namespace kvx
