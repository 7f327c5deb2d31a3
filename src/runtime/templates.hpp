// The CUDA templates of templates/, embedded into the library at build time by a Meson
// generator (templates/embed_templates.py), so the library needs no files at run time.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moejit {

struct EmbeddedTemplate {
    std::string_view name;    // the path under templates/: "group_gemm.cuh", "sm90/ptx.cuh"
    std::string_view source;
};

std::span<const EmbeddedTemplate> embedded_templates();
const EmbeddedTemplate *find_template(std::string_view name);

// The names of `name` and every embedded header it includes with #include "...", recursively,
// sorted; throws Status::internal for an include that is not embedded.
std::vector<std::string_view> template_include_closure(std::string_view source);

}  // namespace moejit
