// The channel between a request's HTTP thread and the engine thread: the engine thread pushes each choice's
// deltas as it samples them and then the end (usage or an error); the HTTP thread waits for them and may
// cancel (a client that went away), which the scheduler sees at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "engine/serving/serve_request.h"

namespace kvx {

struct StreamEvent {
    enum class Kind { delta, done, error } kind = Kind::delta;
    ChoiceDelta delta;  // kind delta
    ServeUsage usage;   // kind done
    std::string error;  // kind error
};

class RequestStream {
public:
    // Engine thread.
    void push(ChoiceDelta delta);
    void finish(const ServeUsage& usage);
    void fail(std::string message);

    // HTTP thread: the next event, waiting up to `wait`; false when none came.
    bool next(StreamEvent& event, std::chrono::milliseconds wait);
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

private:
    void add(StreamEvent event);

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<StreamEvent> events_;
    std::atomic<bool> cancelled_{false};
};

}  // namespace kvx
