#include "engine/serving/request_stream.h"

#include <utility>

namespace kvx {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::stop: return "stop";
        case FinishReason::length: return "length";
        case FinishReason::abort: return "abort";
        case FinishReason::none: break;
    }
    return nullptr;
}

void RequestStream::add(StreamEvent event) {
    {
        std::lock_guard lock(mutex_);
        events_.push_back(std::move(event));
    }
    ready_.notify_one();
}

void RequestStream::push(ChoiceDelta delta) {
    StreamEvent e;
    e.delta = std::move(delta);
    add(std::move(e));
}

void RequestStream::finish(const ServeUsage& usage) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::done;
    e.usage = usage;
    add(std::move(e));
}

void RequestStream::fail(std::string message) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::error;
    e.error = std::move(message);
    add(std::move(e));
}

bool RequestStream::next(StreamEvent& event, std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, wait, [&] { return !events_.empty(); })) return false;
    event = std::move(events_.front());
    events_.pop_front();
    return true;
}

}  // namespace kvx
