#include "runtime/templates.hpp"

#include <algorithm>
#include <set>

#include "base/error.hpp"

namespace moejit {
namespace {

// The names in `#include "name"` lines (angle-bracket includes are toolkit headers, hashed
// through the NVRTC version instead).
std::vector<std::string_view> quoted_includes(std::string_view source) {
    std::vector<std::string_view> names;
    std::size_t pos = 0;
    while ((pos = source.find("#include", pos)) != std::string_view::npos) {
        pos += 8;
        std::size_t line_end = source.find('\n', pos);
        std::string_view line = source.substr(pos, line_end == std::string_view::npos
                                                       ? std::string_view::npos
                                                       : line_end - pos);
        std::size_t open = line.find('"');
        if (open == std::string_view::npos) continue;
        std::size_t close = line.find('"', open + 1);
        if (close == std::string_view::npos) continue;
        names.push_back(line.substr(open + 1, close - open - 1));
    }
    return names;
}

}  // namespace

const EmbeddedTemplate *find_template(std::string_view name) {
    for (const EmbeddedTemplate &t : embedded_templates())
        if (t.name == name) return &t;
    return nullptr;
}

std::vector<std::string_view> template_include_closure(std::string_view source) {
    std::set<std::string_view> seen;
    std::vector<std::string_view> pending = quoted_includes(source);
    while (!pending.empty()) {
        std::string_view name = pending.back();
        pending.pop_back();
        if (!seen.insert(name).second) continue;
        const EmbeddedTemplate *t = find_template(name);
        if (!t) fail(Status::internal, "kernel source includes \"{}\", which is not an embedded template", name);
        for (std::string_view inner : quoted_includes(t->source)) pending.push_back(inner);
    }
    return {seen.begin(), seen.end()};
}

}  // namespace moejit
