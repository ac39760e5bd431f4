#include "engine/model/chat_format.h"

#include <string>

namespace kvx {
namespace {

constexpr ChatFormat kFormats[] = {
    {"chatml", "<|im_start|>", "<|im_end|>", "assistant", /*system_turn=*/true, /*trim_messages=*/false,
     /*template_writes_bos=*/false},
    {"gemma", "<start_of_turn>", "<end_of_turn>", "model", /*system_turn=*/false, /*trim_messages=*/true,
     /*template_writes_bos=*/true},
};

}  // namespace

const ChatFormat* find_chat_format(std::string_view name) {
    for (const ChatFormat& f : kFormats)
        if (f.name == name) return &f;
    return nullptr;
}

std::string_view chat_format_names() {
    static const std::string names = [] {
        std::string joined;
        for (const ChatFormat& f : kFormats) (joined += joined.empty() ? "" : ", ") += f.name;
        return joined;
    }();
    return names;
}

}  // namespace kvx
