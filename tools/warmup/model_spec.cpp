#include "warmup/model_spec.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace warmup {
namespace {

// Shapes from the models' published config.json (hidden_size, moe_intermediate_size or
// intermediate_size, routed experts, experts per token).
const Preset kPresets[] = {
    {"qwen3-30b-a3b", {"qwen3-30b-a3b", 2048, 768, 128, 8, 0.0f}, "Qwen3-30B-A3B"},
    {"qwen3-235b-a22b", {"qwen3-235b-a22b", 4096, 1536, 128, 8, 0.0f}, "Qwen3-235B-A22B"},
    {"deepseek-v2-lite", {"deepseek-v2-lite", 2048, 1408, 64, 6, 0.0f},
     "DeepSeek-V2-Lite (routed experts; the 2 shared experts are a dense MLP)"},
    {"deepseek-v3", {"deepseek-v3", 7168, 2048, 256, 8, 0.0f},
     "DeepSeek-V3 / R1 (routed experts; the shared expert is a dense MLP)"},
    {"mixtral-8x7b", {"mixtral-8x7b", 4096, 14336, 8, 2, 0.0f}, "Mixtral-8x7B"},
    {"gpt-oss-20b", {"gpt-oss-20b", 2880, 2880, 32, 4, 7.0f, true},
     "gpt-oss-20b (gpt-oss activation, limit 7, interleaved gate/up, biases)"},
    {"gpt-oss-120b", {"gpt-oss-120b", 2880, 2880, 128, 4, 7.0f, true},
     "gpt-oss-120b (gpt-oss activation, limit 7, interleaved gate/up, biases)"},
};

std::string preset_names() {
    std::string names;
    for (const Preset &p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
    return names;
}

// Strict decimal integer in [lo, hi]: no sign tricks, no trailing junk.
bool parse_int(const std::string &text, std::int64_t lo, std::int64_t hi, std::int64_t &out) {
    if (text.empty() || text.size() > 18) return false;
    for (char c : text)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    out = std::strtoll(text.c_str(), nullptr, 10);
    return out >= lo && out <= hi;
}

bool parse_float(const std::string &text, float &out) {
    if (text.empty()) return false;
    errno = 0;
    char *end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return false;
    out = static_cast<float>(v);
    return true;
}

std::string trim(const std::string &s) {
    std::size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    std::size_t e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

std::string format_limit(float limit) { return fmt::format("{:g}", limit); }

void check_ranges(const ModelSpec &s, const std::string &what) {
    // Only what the tool itself needs; the library validates the rest (multiples, maxima).
    if (s.hidden <= 0) throw UsageError(fmt::format("{}: hidden size must be positive", what));
    if (s.intermediate <= 0) throw UsageError(fmt::format("{}: intermediate size must be positive", what));
    if (s.experts <= 0) throw UsageError(fmt::format("{}: number of experts must be positive", what));
    if (s.top_k <= 0) throw UsageError(fmt::format("{}: top_k must be positive", what));
    if (s.swiglu_limit < 0) throw UsageError(fmt::format("{}: swiglu_limit must be >= 0 (0: none)", what));
}

// ---- a minimal JSON reader: exactly what a spec file needs (objects, arrays, numbers, strings)

struct JsonValue {
    enum Kind { number, string, object, array, other } kind = other;
    std::string text;  // number: its literal; string: its value
    std::vector<std::pair<std::string, JsonValue>> members;
    std::vector<JsonValue> items;
    int line = 1;
};

class JsonReader {
public:
    JsonReader(const std::string &text, const std::string &origin) : s_(text), origin_(origin) {}

    JsonValue document() {
        JsonValue v = value();
        skip_space();
        if (pos_ != s_.size()) error("unexpected text after the JSON value");
        return v;
    }

    [[noreturn]] void error(const std::string &what) const {
        throw UsageError(fmt::format("spec file {}: line {}: {}", origin_, line_, what));
    }

private:
    void skip_space() {
        while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) {
            if (s_[pos_] == '\n') ++line_;
            ++pos_;
        }
    }
    bool eat(char c) {
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }
    void expect(char c, const char *context) {
        if (!eat(c)) error(fmt::format("expected '{}' {}", c, context));
    }

    JsonValue value() {
        skip_space();
        if (++depth_ > 16) error("nesting too deep");
        JsonValue v;
        v.line = line_;
        if (pos_ >= s_.size()) error("unexpected end of file");
        char c = s_[pos_];
        if (c == '{') {
            ++pos_;
            v.kind = JsonValue::object;
            if (!eat('}')) {
                do {
                    skip_space();
                    if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a quoted key");
                    std::string key = string_literal();
                    expect(':', fmt::format("after key \"{}\"", key).c_str());
                    v.members.emplace_back(key, value());
                } while (eat(','));
                expect('}', "to close the object");
            }
        } else if (c == '[') {
            ++pos_;
            v.kind = JsonValue::array;
            if (!eat(']')) {
                do v.items.push_back(value());
                while (eat(','));
                expect(']', "to close the list");
            }
        } else if (c == '"') {
            v.kind = JsonValue::string;
            v.text = string_literal();
        } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
            v.kind = JsonValue::number;
            std::size_t start = pos_;
            while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                        std::strchr("+-.eE", s_[pos_])))
                ++pos_;
            v.text = s_.substr(start, pos_ - start);
        } else {
            std::size_t start = pos_;
            while (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_]))) ++pos_;
            std::string word = s_.substr(start, pos_ - start);
            if (word != "true" && word != "false" && word != "null")
                error(fmt::format("unexpected character '{}'", c));
            v.text = word;
        }
        --depth_;
        return v;
    }

    std::string string_literal() {
        ++pos_;  // opening quote
        std::string out;
        while (pos_ < s_.size() && s_[pos_] != '"') {
            char c = s_[pos_++];
            if (c == '\n') error("newline inside a string");
            if (c == '\\') {
                if (pos_ >= s_.size()) break;
                char e = s_[pos_++];
                switch (e) {
                case '"': case '\\': case '/': out += e; break;
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                default: error(fmt::format("unsupported escape \\{} in a string", e));
                }
            } else {
                out += c;
            }
        }
        if (pos_ >= s_.size()) error("unterminated string");
        ++pos_;
        return out;
    }

    const std::string &s_;
    const std::string &origin_;
    std::size_t pos_ = 0;
    int line_ = 1;
    int depth_ = 0;
};

ModelSpec spec_from_object(const JsonValue &obj, std::size_t index, const std::string &origin) {
    std::string where = fmt::format("spec file {}: entry {} (line {})", origin, index + 1, obj.line);
    if (obj.kind != JsonValue::object)
        throw UsageError(where + ": expected an object {\"hidden\": .., \"intermediate\": .., "
                                 "\"experts\": .., \"top_k\": ..}");
    ModelSpec s;
    bool have_h = false, have_i = false, have_e = false, have_k = false;
    std::string name;
    for (const auto &[key, v] : obj.members) {
        auto integer = [&](std::int64_t hi) {
            std::int64_t out = 0;
            if (v.kind != JsonValue::number || !parse_int(v.text, 1, hi, out))
                throw UsageError(fmt::format("{}: \"{}\" must be a positive integer <= {}, got {}", where,
                                             key, hi, v.text.empty() ? "a non-number" : v.text));
            return out;
        };
        if (key == "hidden") s.hidden = integer(1 << 20), have_h = true;
        else if (key == "intermediate") s.intermediate = integer(1 << 20), have_i = true;
        else if (key == "experts") s.experts = static_cast<std::int32_t>(integer(1 << 16)), have_e = true;
        else if (key == "top_k") s.top_k = static_cast<std::int32_t>(integer(1 << 10)), have_k = true;
        else if (key == "swiglu_limit") {
            if (v.kind != JsonValue::number || !parse_float(v.text, s.swiglu_limit))
                throw UsageError(fmt::format("{}: \"swiglu_limit\" must be a number, got {}", where, v.text));
        } else if (key == "name") {
            if (v.kind != JsonValue::string || v.text.empty())
                throw UsageError(where + ": \"name\" must be a non-empty string");
            name = v.text;
        } else {
            throw UsageError(fmt::format("{}: unknown key \"{}\" (known: hidden, intermediate, experts, "
                                         "top_k, swiglu_limit, name)", where, key));
        }
    }
    const char *missing = !have_h ? "hidden" : !have_i ? "intermediate" : !have_e ? "experts" : !have_k ? "top_k" : nullptr;
    if (missing) throw UsageError(fmt::format("{}: missing \"{}\"", where, missing));
    s.name = !name.empty() ? name
             : fmt::format("{},{},{},{}{}", s.hidden, s.intermediate, s.experts, s.top_k,
                           s.swiglu_limit > 0 ? fmt::format(",{}", format_limit(s.swiglu_limit)) : std::string());
    check_ranges(s, where);
    return s;
}

}  // namespace

std::span<const Preset> presets() { return kPresets; }

ModelSpec find_preset(const std::string &name) {
    for (const Preset &p : kPresets)
        if (name == p.name) return p.spec;
    throw UsageError(fmt::format("unknown preset \"{}\" (known presets: {}; or describe the layer with "
                                 "--spec H,I,E,k)", name, preset_names()));
}

ModelSpec parse_spec(const std::string &text) {
    std::vector<std::string> parts;
    std::stringstream in(text);
    for (std::string part; std::getline(in, part, ',');) parts.push_back(trim(part));
    if (!text.empty() && text.back() == ',') parts.push_back("");
    auto bad = [&](const std::string &why) {
        return UsageError(fmt::format("malformed --spec \"{}\": {} (expected H,I,E,k or H,I,E,k,limit: "
                                      "hidden size, moe intermediate size, experts, top-k, optional "
                                      "swiglu limit; e.g. --spec 2048,768,128,8)", text, why));
    };
    if (parts.size() != 4 && parts.size() != 5)
        throw bad(fmt::format("{} field{} instead of 4 or 5", parts.size(), parts.size() == 1 ? "" : "s"));
    static const char *field_names[] = {"hidden size", "intermediate size", "experts", "top-k"};
    static const std::int64_t maxima[] = {1 << 20, 1 << 20, 1 << 16, 1 << 10};
    std::int64_t v[4];
    for (int i = 0; i < 4; ++i)
        if (!parse_int(parts[i], 1, maxima[i], v[i]))
            throw bad(fmt::format("{} \"{}\" is not a positive integer <= {}", field_names[i], parts[i], maxima[i]));
    ModelSpec s;
    s.hidden = v[0];
    s.intermediate = v[1];
    s.experts = static_cast<std::int32_t>(v[2]);
    s.top_k = static_cast<std::int32_t>(v[3]);
    if (parts.size() == 5 && (!parse_float(parts[4], s.swiglu_limit) || s.swiglu_limit < 0))
        throw bad(fmt::format("swiglu limit \"{}\" is not a number >= 0", parts[4]));
    s.name = text;
    check_ranges(s, "--spec " + text);
    return s;
}

std::vector<ModelSpec> parse_spec_json(const std::string &text, const std::string &origin) {
    JsonReader reader(text, origin);
    JsonValue doc = reader.document();
    std::vector<ModelSpec> specs;
    if (doc.kind == JsonValue::object) {
        specs.push_back(spec_from_object(doc, 0, origin));
    } else if (doc.kind == JsonValue::array) {
        for (std::size_t i = 0; i < doc.items.size(); ++i) specs.push_back(spec_from_object(doc.items[i], i, origin));
    } else {
        throw UsageError(fmt::format("spec file {}: expected a JSON list of layer objects", origin));
    }
    if (specs.empty()) throw UsageError(fmt::format("spec file {}: the list is empty", origin));
    return specs;
}

std::vector<ModelSpec> parse_spec_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(fmt::format("spec file {} cannot be read", path));
    std::stringstream buffer;
    buffer << in.rdbuf();
    return parse_spec_json(buffer.str(), path);
}

}  // namespace warmup
