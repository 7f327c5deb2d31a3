#include "runtime/cuda_headers.hpp"

#include <deque>
#include <filesystem>
#include <set>
#include <string_view>

#include "base/atomic_file.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "base/sha256.hpp"
#include "runtime/templates.hpp"

namespace moejit {
namespace {

namespace fs = std::filesystem;

// Toolkit headers are a few hundred KiB; anything beyond this is not a header we should hash.
constexpr std::size_t kMaxHeaderBytes = std::size_t(64) << 20;

// The names in `#include "x"` / `#include <x>` lines of `text` (whitespace after # allowed).
std::vector<std::string> include_names(std::string_view text) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        std::size_t i = line.find_first_not_of(" \t");
        if (i == std::string_view::npos || line[i] != '#') continue;
        i = line.find_first_not_of(" \t", i + 1);
        if (i == std::string_view::npos || line.substr(i, 7) != "include") continue;
        i = line.find_first_not_of(" \t", i + 7);
        if (i == std::string_view::npos || (line[i] != '"' && line[i] != '<')) continue;
        const char close = line[i] == '"' ? '"' : '>';
        std::size_t j = line.find(close, i + 1);
        if (j == std::string_view::npos || j == i + 1) continue;
        out.emplace_back(line.substr(i + 1, j - i - 1));
    }
    return out;
}

struct Result {
    std::string digest;
    std::vector<std::string> files;
};

Result compute() {
    Result r;
    const std::string &include = cuda_include_dir();
    if (include.empty()) {
        r.digest = "no-cuda-include-dir";
        return r;
    }
    Sha256 h;
    h.field("moejit-cuda-headers");
    h.field(include);
    std::set<std::string> seen;  // resolved paths and unresolved names
    std::deque<std::pair<std::string, std::string>> todo;  // (name, folder of the includer; "" = -I only)
    for (const EmbeddedTemplate &t : embedded_templates())
        for (std::string &name : include_names(t.source))
            if (!find_template(name)) todo.emplace_back(std::move(name), "");
    while (!todo.empty()) {
        auto [name, from] = std::move(todo.front());
        todo.pop_front();
        std::string path;
        std::error_code ec;
        for (const std::string &dir : {from, include}) {
            if (dir.empty()) continue;
            fs::path candidate = fs::path(dir) / name;
            if (fs::is_regular_file(candidate, ec)) {
                path = candidate.lexically_normal().string();
                break;
            }
        }
        if (path.empty()) {
            if (seen.insert("?" + name).second) {
                h.field("absent");
                h.field(name);
            }
            continue;
        }
        if (!seen.insert(path).second) continue;
        std::vector<char> bytes;
        std::string why;
        if (read_regular_file(path, kMaxHeaderBytes, bytes, why, /*follow_symlink=*/true) != ReadStatus::ok) {
            h.field("unreadable");
            h.field(path);
            continue;
        }
        const std::string_view text(bytes.data(), bytes.size());
        h.field(path);
        h.field(to_hex(sha256(text)));
        r.files.push_back(path);
        const std::string folder = fs::path(path).parent_path().string();
        for (std::string &next : include_names(text)) todo.emplace_back(std::move(next), folder);
    }
    r.digest = to_hex(h.finish());
    return r;
}

const Result &result() {
    static const Result r = compute();
    return r;
}

}  // namespace

const std::string &cuda_headers_digest() { return result().digest; }
const std::vector<std::string> &cuda_headers_hashed() { return result().files; }

}  // namespace moejit
