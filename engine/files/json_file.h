// JSON that arrives in a file (config.json, a safetensors header, tokenizer.json, encoder.json), parsed
// with the limits a hostile file must not get past. Nesting is limited because nlohmann's copies and
// comparisons recurse once per level: a file of a million '[' would overflow the stack long after parsing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvx {

// Deeper than any file kvx reads (tokenizer.json nests about 6 levels), shallow enough for any stack.
inline constexpr int kMaxJsonDepth = 64;

// Throws kvx::Error "SOURCE is not valid JSON (REASON)" or "SOURCE nests deeper than 64 levels".
nlohmann::json parse_json(std::string_view text, const std::string& source);

// The regular file `path` (RegularFile's rules, at most max_bytes) as a JSON object; `what` names it in
// messages ("model config", "tokenizer").
nlohmann::json read_json_object(const std::string& path, const std::string& what, size_t max_bytes);

// A JSON value as an integer from lo to hi. JSON integers only: 2.7, true, "2" and 1e20 are refused, never
// rounded, wrapped or clamped. Throws kvx::Error "WHAT must be an integer from LO to HI, not VALUE".
int64_t json_integer(const nlohmann::json& value, int64_t lo, int64_t hi, const std::string& what);

// A JSON value's text for a message: at most 40 characters of its dump.
std::string json_excerpt(const nlohmann::json& value);

}  // namespace kvx
