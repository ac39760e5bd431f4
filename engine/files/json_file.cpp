#include "engine/files/json_file.h"

#include <optional>

#include "engine/files/regular_file.h"
#include "kernels/error.h"

namespace kvx {

nlohmann::json parse_json(std::string_view text, const std::string& source) {
    using nlohmann::json;
    // The callback sees every value as it starts; refusing there stops the parse before the deep value is built.
    const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t event, json&) {
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth)
            throw Error(source + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), limit_depth);
    } catch (const json::exception& e) {
        // nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
        std::string reason = e.what();
        if (const size_t bracket = reason.find("] "); reason.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos)
            reason.erase(0, bracket + 2);
        throw Error(source + " is not valid JSON (" + reason + ")");
    }
}

int64_t json_integer(const nlohmann::json& value, int64_t lo, int64_t hi, const std::string& what) {
    std::optional<int64_t> v;
    if (value.is_number_unsigned()) {
        if (value.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) v = static_cast<int64_t>(value.get<uint64_t>());
    } else if (value.is_number_integer()) {
        v = value.get<int64_t>();
    }
    if (!v || *v < lo || *v > hi)
        throw Error(what + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " +
                    json_excerpt(value));
    return *v;
}

std::string json_excerpt(const nlohmann::json& value) {
    std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
}

nlohmann::json read_json_object(const std::string& path, const std::string& what, size_t max_bytes) {
    const std::string source = what + " '" + path + "'";
    nlohmann::json j = parse_json(RegularFile(path, what).read_all(max_bytes), source);
    if (!j.is_object()) throw Error(source + " is not a JSON object");
    return j;
}

}  // namespace kvx
