// recognise_chat_template (engine/model/chat_format_markers.h) on the templates of testdata/chat_templates/,
// against recognised.json beside them: what the converter's jinja2 rendering makes of each template
// (tools/kvx_tools/convert/tokenizer/chat_template.py), which tests/python/test_chat_template.py checks the file
// against. So the marker reading and the rendering agree on every template there.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/model/chat_format_markers.h"

using namespace kvx;

namespace {

const std::filesystem::path templates = std::filesystem::path(KVX_SOURCE_DIR) / "testdata" / "chat_templates";

std::string read(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

TEST_CASE("chat templates are recognised by their markers as the converter recognises them by rendering", "[chat]") {
    const nlohmann::json expected = nlohmann::json::parse(read(templates / "recognised.json"));
    REQUIRE(expected.size() >= 10);
    for (const auto& [name, entry] : expected.items()) {
        INFO(name);
        const ChatConfig got = recognise_chat_template(read(templates / name));
        if (entry["format"].is_null()) {
            CHECK(got.format.empty());
            CHECK(!got.unsupported_reason.empty());
            continue;
        }
        CHECK(got.format == entry["format"].get<std::string>());
        CHECK(got.unsupported_reason.empty());
        CHECK(got.add_bos == entry.value("add_bos", false));
        CHECK(got.has_default_system == entry.contains("default_system"));
        CHECK(got.default_system == entry.value("default_system", std::string()));
    }
}

TEST_CASE("chat templates kvx cannot pin down by their markers are refused with the reason", "[chat]") {
    auto reason = [](std::string_view jinja) {
        const ChatConfig c = recognise_chat_template(jinja);
        CHECK(c.format.empty());
        return c.unsupported_reason;
    };
    CHECK_THAT(reason(""), Catch::Contains("none of the formats"));
    CHECK_THAT(reason("{{ '[INST] ' + messages[0]['content'] + ' [/INST]' }}"), Catch::Contains("chatml, gemma"));
    CHECK_THAT(reason("<|im_start|>x<|im_end|><start_of_turn>model<end_of_turn>{{ m | trim }}"),
               Catch::Contains("both ChatML's and Gemma's"));
    CHECK_THAT(reason("{{ '<|im_start|>' }}{{ bos_token }}<|im_end|>"), Catch::Contains("bos_token other than"));
    CHECK_THAT(reason("<|im_start|><|im_end|><think>"), Catch::Contains("<think>"));
    CHECK_THAT(reason("<|im_start|>system\nA<|im_end|>{% if x %}<|im_start|>system\nB<|im_end|>{% endif %}"),
               Catch::Contains("more than one default system message"));
    // A marker named only in a comment is no marker.
    CHECK_THAT(reason("{# <|im_start|> <|im_end|> #}{{ messages }}"), Catch::Contains("none of the formats"));
}
