// MoE layer shapes to warm: the built-in model presets, `--spec H,I,E,k[,limit]` and
// `--spec-file` (a small JSON list). Parsing errors are UsageError with a message that names
// the offending preset, spec or file position.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace warmup {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct ModelSpec {
    std::string name;            // preset name, or "H,I,E,k[,limit]"
    std::int64_t hidden = 0;     // H
    std::int64_t intermediate = 0;  // I = moe_intermediate_size (per expert)
    std::int32_t experts = 0;    // E (routed experts)
    std::int32_t top_k = 0;      // k
    float swiglu_limit = 0;      // <= 0: none
    // gpt-oss's experts: the gpt-oss activation, interleaved gate/up, biases (presets only).
    bool gpt_oss = false;
};

struct Preset {
    const char *name;
    ModelSpec spec;
    const char *note;
};

std::span<const Preset> presets();
// Throws UsageError naming `name` and listing the known presets.
ModelSpec find_preset(const std::string &name);
// "H,I,E,k" or "H,I,E,k,limit"; throws UsageError naming `text`.
ModelSpec parse_spec(const std::string &text);
// A JSON list of {"hidden", "intermediate", "experts", "top_k", optional "swiglu_limit",
// optional "name"} (a single object is accepted too); throws UsageError naming the file.
std::vector<ModelSpec> parse_spec_file(const std::string &path);
std::vector<ModelSpec> parse_spec_json(const std::string &text, const std::string &origin);

}  // namespace warmup
