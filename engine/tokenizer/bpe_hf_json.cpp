// HF tokenizers' tokenizer.json (read_hf_tokenizer_json in bpe_spec.h). Each component is read by its
// "type"; one kvx does not implement stops loading with a message that names it, rather than encoding
// differently from HF.
#include <memory>
#include <unordered_map>

#include "engine/files/json_file.h"
#include "engine/tokenizer/bpe_spec.h"
#include "kernels/error.h"

namespace kvx {
namespace {

using nlohmann::json;

std::string type_of(const json& j) {
    return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?";
}

bool flag(const json& j, const char* key, bool fallback) {
    return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

// The string in j[key], "" when it is null or missing.
std::string optional_string(const json& j, const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

void read_model(const json& m, int64_t id_limit, BpeTokenizerSpec& spec) {
    const std::string& src = spec.source;
    if (!m.is_object()) throw Error(src + " has no model");
    if (type_of(m) != "BPE") throw Error(src + ": model type '" + type_of(m) + "' is not supported (kvx reads BPE)");
    if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() != 0.0)
        throw Error(src + ": BPE dropout is not supported (it makes encoding random)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (!optional_string(m, key).empty())
            throw Error(src + ": BPE " + key + " is not supported (byte-level BPE has none)");
    spec.model.vocab = read_vocab(m.value("vocab", json()), src, id_limit);
    if (!m.contains("merges") || !m["merges"].is_array()) throw Error(src + ": the BPE model has no merges");
    for (const json& merge : m["merges"]) {
        const size_t rank = spec.model.merges.size();
        if (merge.is_string()) {
            spec.model.merges.push_back(split_merge(merge.get<std::string>(), rank, src));
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
            spec.model.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
        } else {
            throw Error(src + ": merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    spec.model.unk_token = optional_string(m, "unk_token");
    spec.model.fuse_unk = flag(m, "fuse_unk", false);
    spec.model.byte_fallback = flag(m, "byte_fallback", false);
    spec.model.ignore_merges = flag(m, "ignore_merges", false);
}

void check_normalizer(const json& n, const std::string& src) {
    if (n.is_null()) return;
    if (type_of(n) == "Sequence" && n.value("normalizers", json::array()).empty()) return;
    throw Error(src + ": normalizer '" + type_of(n) + "' is not supported (kvx reads tokenizers without a normalizer)");
}

SplitBehavior split_behavior(const std::string& name, const std::string& src) {
    static const std::unordered_map<std::string, SplitBehavior> behaviors = {
        {"Removed", SplitBehavior::Removed},
        {"Isolated", SplitBehavior::Isolated},
        {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
        {"MergedWithNext", SplitBehavior::MergedWithNext},
        {"Contiguous", SplitBehavior::Contiguous},
    };
    auto it = behaviors.find(name);
    if (it == behaviors.end()) throw Error(src + ": Split behavior '" + name + "' is not supported");
    return it->second;
}

// Sequences flattened into the list of their leaves, in order.
void flatten(const json& p, std::vector<json>& out) {
    if (type_of(p) == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
        for (const json& child : p["pretokenizers"]) flatten(child, out);
    } else {
        out.push_back(p);
    }
}

void read_pre_tokenizer(const json& p, BpeTokenizerSpec& spec) {
    const std::string& src = spec.source;
    std::vector<json> leaves;
    if (!p.is_null()) flatten(p, leaves);
    if (leaves.empty() || type_of(leaves.back()) != "ByteLevel")
        throw Error(src + ": the pre_tokenizer does not end with ByteLevel (kvx reads byte-level BPE tokenizers)");
    for (size_t k = 0; k < leaves.size(); ++k) {
        const json& leaf = leaves[k];
        const std::string type = type_of(leaf);
        if (type == "ByteLevel") {
            if (k + 1 != leaves.size())
                throw Error(src + ": pre_tokenizer ByteLevel before another pre-tokenizer is not supported");
            append_byte_level_steps(spec.pre_tokenizer, flag(leaf, "add_prefix_space", true), flag(leaf, "use_regex", true));
        } else if (type == "Split") {
            const json pattern = leaf.value("pattern", json());
            std::shared_ptr<Regex> regex;
            if (pattern.contains("Regex") && pattern["Regex"].is_string())
                regex = std::make_shared<Regex>(pattern["Regex"].get<std::string>(), Regex::Syntax::Oniguruma);
            else if (pattern.contains("String") && pattern["String"].is_string())
                regex = std::make_shared<Regex>(pattern["String"].get<std::string>(), Regex::Syntax::Literal);
            else
                throw Error(src + ": pre_tokenizer Split has no Regex or String pattern");
            spec.pre_tokenizer.push_back({PreTokenizerStep::Kind::Split, std::move(regex),
                                          split_behavior(leaf.value("behavior", std::string("?")), src),
                                          flag(leaf, "invert", false)});
        } else if (type == "Digits") {
            append_digits_step(spec.pre_tokenizer, flag(leaf, "individual_digits", false));
        } else {
            throw Error(src + ": pre_tokenizer '" + type + "' is not supported (kvx reads ByteLevel, Split, Digits and Sequence)");
        }
    }
}

void check_decoder(const json& d, const std::string& src) {
    if (type_of(d) != "ByteLevel")
        throw Error(src + ": decoder '" + (d.is_null() ? std::string("null") : type_of(d)) +
                    "' is not supported (kvx decodes byte-level BPE: ByteLevel)");
}

// The ids a post-processor puts in front of a single text. What it would put after the text (an EOS or SEP)
// is left out: kvx encodes prompts to be continued, not finished.
std::vector<int32_t> prefix_of(const json& p, int64_t id_limit, const std::string& src) {
    if (p.is_null()) return {};
    const std::string type = type_of(p);
    if (type == "ByteLevel") return {};  // trims offsets only
    if (type == "RobertaProcessing" || type == "BertProcessing") {
        const json cls = p.value("cls", json());
        if (!cls.is_array() || cls.size() != 2)
            throw Error(src + ": post_processor " + type + " has no [token, id] cls");
        return {static_cast<int32_t>(json_integer(cls[1], 0, id_limit - 1, src + ": post_processor " + type + "'s cls id"))};
    }
    if (type == "TemplateProcessing") {
        std::vector<int32_t> ids;
        const json special = p.value("special_tokens", json::object());
        for (const json& piece : p.value("single", json::array())) {
            if (piece.contains("Sequence")) return ids;
            const std::string name = piece.contains("SpecialToken") ? piece["SpecialToken"].value("id", "") : "";
            if (!special.contains(name) || !special[name].contains("ids"))
                throw Error(src + ": post_processor template names special token '" + name + "' but does not define it");
            const json& special_ids = special[name]["ids"];
            if (!special_ids.is_array())
                throw Error(src + ": post_processor special token '" + name + "' has no list of ids");
            for (const json& id : special_ids)
                ids.push_back(static_cast<int32_t>(
                    json_integer(id, 0, id_limit - 1, src + ": post_processor special token '" + name + "'s id")));
        }
        throw Error(src + ": post_processor template for a single text has no $A");
    }
    if (type == "Sequence") {
        std::vector<int32_t> ids;  // each processor wraps the result of the ones before it
        for (const json& child : p.value("processors", json::array())) {
            std::vector<int32_t> outer = prefix_of(child, id_limit, src);
            ids.insert(ids.begin(), outer.begin(), outer.end());
        }
        return ids;
    }
    throw Error(src + ": post_processor '" + type + "' is not supported");
}

// HF (0.23) loading a tokenizer.json gives an added token the id of its content in the model's vocabulary,
// else the next of vocabulary size, vocabulary size + 1, ... in file order, whatever id the file says; a
// content seen before keeps its id. kvx follows HF.
void read_added_tokens(const json& added, int64_t id_limit, BpeTokenizerSpec& spec) {
    if (added.is_null()) return;
    if (!added.is_array()) throw Error(spec.source + ": added_tokens is not a list");
    std::unordered_map<std::string, int32_t> ids(spec.model.vocab.begin(), spec.model.vocab.end());
    auto next_id = static_cast<int32_t>(spec.model.vocab.size());
    for (const json& t : added) {
        if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
            throw Error(spec.source + ": an added token has no content");
        AddedToken token;
        token.content = t["content"].get<std::string>();
        if (token.content.empty()) continue;  // HF ignores them
        token.special = flag(t, "special", false);
        token.single_word = flag(t, "single_word", false);
        token.lstrip = flag(t, "lstrip", false);
        token.rstrip = flag(t, "rstrip", false);
        token.normalized = flag(t, "normalized", !token.special);
        auto [it, is_new] = ids.try_emplace(token.content, next_id);
        if (is_new && next_id++ >= id_limit)
            throw Error(spec.source + ": added token '" + token.content + "' gets id " + std::to_string(it->second) +
                        ", beyond the " + std::to_string(id_limit) + " ids allowed");
        token.id = it->second;
        spec.added_tokens.push_back(std::move(token));
    }
}

}  // namespace

BpeTokenizerSpec read_hf_tokenizer_json(const std::string& path, int64_t id_limit) {
    BpeTokenizerSpec spec;
    spec.source = "tokenizer '" + path + "'";
    const json j = read_json_object(path, "tokenizer", kMaxTokenizerFileBytes);
    try {
        read_model(j.value("model", json()), id_limit, spec);
        check_normalizer(j.value("normalizer", json()), spec.source);
        read_pre_tokenizer(j.value("pre_tokenizer", json()), spec);
        check_decoder(j.value("decoder", json()), spec.source);
        spec.prefix_ids = prefix_of(j.value("post_processor", json()), id_limit, spec.source);
        read_added_tokens(j.value("added_tokens", json()), id_limit, spec);
    } catch (const json::exception& e) {
        // A field of an unexpected JSON type where a reader above does not check it: nlohmann names the types.
        std::string reason = e.what();
        if (const size_t bracket = reason.find("] "); bracket != std::string::npos) reason.erase(0, bracket + 2);
        throw Error(spec.source + " is malformed: " + reason);
    }
    return spec;
}

}  // namespace kvx
