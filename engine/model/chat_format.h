// The conversation formats kvx applies natively. The converter recognises a model's Jinja chat template as
// one of these by rendering it (tools/kvx_tools/convert/tokenizer/chat_template.py, whose renderings these must equal);
// a format is data, read by the one ChatSession.
//
//   chatml  <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n
//   gemma   <bos><start_of_turn>user\n{system}\n\n{message}<end_of_turn>\n<start_of_turn>model\n
//
// (the bos is the template's own, when it writes one: ChatConfig::add_bos). The model ends its answer with
// the end-of-turn marker; the next turn's text starts by writing it again, closing the answer.
#pragma once

#include <string_view>

namespace kvx {

struct ChatFormat {
    std::string_view name;
    std::string_view turn_start;      // before a turn's role name
    std::string_view turn_end;        // after a turn's message: the marker the model ends its answer with
    std::string_view assistant_role;  // the role name of the model's turns
    bool system_turn;                 // the system message is a turn of its own; else it leads the first user
                                      // message, a blank line between them
    bool trim_messages;               // user messages lose leading and trailing whitespace, as the template trims them
    bool template_writes_bos;         // the family's own templates start with bos_token: what a format given by
                                      // name (kvx chat --chat-template gemma) takes for ChatConfig::add_bos
};

// The format named `name`, or null.
const ChatFormat* find_chat_format(std::string_view name);

// The names of every format, comma-separated, for messages.
std::string_view chat_format_names();

}  // namespace kvx
