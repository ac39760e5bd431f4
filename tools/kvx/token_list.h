// Token ids on the command line and on stdout: comma-separated decimal integers, e.g. 1,403,407, the
// format of --tokens, of `kvx tokenize`, and of `kvx generate` for models without a tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace kvx::cli {

// Throws kvx::Error naming the first item that is not a non-negative 32-bit integer.
std::vector<int32_t> parse_token_list(const std::string& text);

// A Tokenizer stand-in for models that have none: decode writes each id itself, comma-separated, so that
// generated output is again a valid --tokens list. encode refuses text.
std::unique_ptr<Tokenizer> token_id_text();

}  // namespace kvx::cli
