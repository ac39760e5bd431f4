// A Jinja chat template recognised as one of kvx's formats (chat_format.h) by the markers it writes, for models
// that arrive with the template's text only (a GGUF file's tokenizer.chat_template), where no converter has
// rendered it (tools/kvx_tools/convert/tokenizer/chat_template.py, whose results this mirrors on the templates
// of testdata/chat_templates/). kvx interprets no Jinja: the recognition is conservative, and a template whose
// markers are absent, belong to a format kvx does not apply, mix formats, or write bos_token or a default system
// message in a way a plain reading cannot pin down, gets no format and the reason.
//
//   chatml  <|im_start|> and <|im_end|>; a default system message is the literal text between
//           "<|im_start|>system" + newline and <|im_end|>, where the template writes one
//   gemma   <start_of_turn> and <end_of_turn>, messages trimmed (| trim), the assistant's turns "model"
//
// Either may write bos_token, as its very first output only (ChatConfig::add_bos).
#pragma once

#include <string_view>

#include "engine/model/model_config.h"

namespace kvx {

// The ChatConfig for `jinja` (template_file left empty): a format, or none with unsupported_reason.
ChatConfig recognise_chat_template(std::string_view jinja);

}  // namespace kvx
