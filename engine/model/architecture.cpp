#include "engine/model/architecture.h"

#include <deque>
#include <nlohmann/json.hpp>
#include <utility>

#include "kernels/error.h"

namespace kvx {
namespace {

// engine/model/families.json as it was at build time (engine/model/CMakeLists.txt writes this file into the
// build tree, and re-runs CMake when the JSON changes, so an edit of the table rebuilds kvx).
constexpr std::string_view kFamiliesJson =
#include <families_json.inc>
    ;

// nlohmann's ordered object keeps the file's order, so architecture_names() lists the families as the table does.
using Json = nlohmann::ordered_json;

// A kind kvx computes, by the name families.json gives it, and what its entry there must say of it: the field
// `fact` (none when empty) is `value`, or the table and the kernels disagree about what the kind is.
template <class Kind>
struct KnownKind {
    std::string_view name;
    Kind kind;
    std::string_view fact;
    bool value;
};

constexpr KnownKind<NormKind> kNormKinds[] = {
    {"rms", NormKind::rms, "bias", false},
    {"layer", NormKind::layer, "bias", true},
};
constexpr KnownKind<PositionKind> kPositionKinds[] = {
    {"rotary", PositionKind::rotary, "", false},
    {"learned", PositionKind::learned, "", false},
};
constexpr KnownKind<MlpKind> kMlpKinds[] = {
    {"swiglu", MlpKind::swiglu, "gated", true},
    {"gelu_tanh", MlpKind::gelu_tanh, "gated", false},
    {"geglu_tanh", MlpKind::geglu_tanh, "gated", true},
    {"gelu", MlpKind::gelu_erf, "gated", false},
};

// One section of kinds ("norm_kinds", ...) as the table lists them, each mapped to the C++ kind.
template <class Kind>
using KindList = std::vector<std::pair<std::string, Kind>>;

struct FamilyTable {
    KindList<NormKind> norms;
    KindList<PositionKind> positions;
    KindList<MlpKind> mlps;
    std::deque<std::string> names;  // what the traits' names view: a deque never moves what it holds
    std::vector<ArchitectureTraits> architectures;
};

[[noreturn]] void bad_table(const std::string& what) { throw Error("families.json: " + what); }

const Json& member(const Json& object, const char* key, const std::string& where) {
    if (!object.is_object() || !object.contains(key)) bad_table(where + " has no '" + key + "'");
    return object[key];
}

template <class Kind, size_t N>
std::string known_names(const KnownKind<Kind> (&known)[N]) {
    std::string names;
    for (const KnownKind<Kind>& k : known) names += (names.empty() ? "" : ", ") + std::string(k.name);
    return names;
}

// The section `key` of the table: every entry a kind kvx computes, stating the facts kvx computes it with.
template <class Kind, size_t N>
KindList<Kind> read_kinds(const Json& root, const char* key, const KnownKind<Kind> (&known)[N]) {
    const Json& section = member(root, key, "the table");
    if (!section.is_object() || section.empty()) bad_table(std::string("'") + key + "' must be an object of kinds");
    KindList<Kind> kinds;
    for (const auto& [name, entry] : section.items()) {
        const std::string where = std::string(key) + " '" + name + "'";
        const KnownKind<Kind>* match = nullptr;
        for (const KnownKind<Kind>& k : known)
            if (k.name == name) match = &k;
        if (!match) bad_table(where + " is not a kind this kvx computes (" + known_names(known) + ")");
        if (!match->fact.empty()) {
            const std::string fact(match->fact);
            const Json& value = member(entry, fact.c_str(), where);
            if (!value.is_boolean() || value.get<bool>() != match->value)
                bad_table(where + " says '" + fact + "': " + value.dump() + ", but kvx computes it with '" + fact +
                          "': " + (match->value ? "true" : "false"));
        }
        kinds.emplace_back(name, match->kind);
    }
    return kinds;
}

template <class Kind>
Kind kind_of(const KindList<Kind>& kinds, const char* section, const Json& row, const char* key,
             const std::string& where) {
    const Json& value = member(row, key, where);
    if (value.is_string())
        for (const auto& [name, kind] : kinds)
            if (name == value.get<std::string>()) return kind;
    bad_table(where + " has '" + key + "': " + value.dump() + ", not one of the table's " + section);
}

FamilyTable parse_table(std::string_view text) {
    Json root;
    try {
        root = Json::parse(text);
    } catch (const Json::exception& e) {
        bad_table(std::string("not valid JSON (") + e.what() + ")");
    }
    FamilyTable t;
    t.norms = read_kinds(root, "norm_kinds", kNormKinds);
    t.positions = read_kinds(root, "position_kinds", kPositionKinds);
    t.mlps = read_kinds(root, "mlp_kinds", kMlpKinds);
    const Json& rows = member(root, "architectures", "the table");
    if (!rows.is_object() || rows.empty()) bad_table("'architectures' must be an object of families");
    for (const auto& [name, row] : rows.items()) {
        const std::string where = "architecture '" + name + "'";
        ArchitectureTraits a;
        a.name = t.names.emplace_back(name);
        a.norm = kind_of(t.norms, "norm_kinds", row, "norm", where);
        a.positions = kind_of(t.positions, "position_kinds", row, "positions", where);
        a.mlp = kind_of(t.mlps, "mlp_kinds", row, "mlp", where);
        t.architectures.push_back(a);
    }
    return t;
}

// Parsed on first use; a table that does not parse throws at every call, so kvx stops at its first look.
const FamilyTable& table() {
    static const FamilyTable parsed = parse_table(kFamiliesJson);
    return parsed;
}

template <class Kind>
const Kind* find_kind(const KindList<Kind>& kinds, std::string_view name) {
    for (const auto& [n, kind] : kinds)
        if (n == name) return &kind;
    return nullptr;
}

template <class Kind>
std::string names_of(const KindList<Kind>& kinds) {
    std::string names;
    for (const auto& entry : kinds) names += (names.empty() ? "" : ", ") + entry.first;
    return names;
}

}  // namespace

const NormKind* find_norm_kind(std::string_view name) { return find_kind(table().norms, name); }
const PositionKind* find_position_kind(std::string_view name) { return find_kind(table().positions, name); }
const MlpKind* find_mlp_kind(std::string_view name) { return find_kind(table().mlps, name); }

std::string norm_kind_names() { return names_of(table().norms); }
std::string position_kind_names() { return names_of(table().positions); }
std::string mlp_kind_names() { return names_of(table().mlps); }

const ArchitectureTraits* find_architecture(std::string_view name) {
    for (const ArchitectureTraits& a : table().architectures)
        if (a.name == name) return &a;
    return nullptr;
}

std::string architecture_names() {
    std::string names;
    for (const ArchitectureTraits& a : table().architectures) names += (names.empty() ? "" : ", ") + std::string(a.name);
    return names;
}

std::vector<std::string> check_families_json(std::string_view text) {
    const FamilyTable t = parse_table(text);
    return {t.names.begin(), t.names.end()};
}

}  // namespace kvx
