#include "gemm/tuning.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/atomic_file.hpp"
#include "runtime/cache_paths.hpp"
#include "base/error.hpp"
#include "base/sha256.hpp"

namespace moejit {
namespace {

constexpr const char *kMagic = "moejit-tuning 1";
constexpr std::size_t kMaxTuningFileBytes = 64 * 1024;  // three short lines

std::string fs_parent(const std::string &path) { return std::filesystem::path(path).parent_path().string(); }

std::int64_t size_class(std::int64_t rows) {
    std::int64_t c = 1;
    while (c < rows) c <<= 1;
    return c;
}

}  // namespace

std::string tuning_key(const GemmProblem &p, std::int64_t rows, int cc) {
    return fmt::format("{}{} dtype={} c={} m={} n={} k={}{} bt={} acc={} experts={} rows<={} sm_{}",
                       p.kind == GemmKind::same_nk ? "same_nk" : "same_mn",
                       std::string(p.gather_a ? "_ga" : "") + (p.swiglu ? "_swiglu" : ""),
                       dtype_name(p.dtype), dtype_name(p.c_dtype), p.m, p.n, p.k,
                       p.k_split > 0 ? fmt::format(" k_split={}", p.k_split) : "", p.b_transposed ? 1 : 0,
                       p.accumulate ? 1 : 0, p.num_experts, size_class(rows), cc);
}

std::vector<GemmTileConfig> tuning_candidates(const GemmProblem &p, int cc) {
    auto valid = [&](const GemmTileConfig &c) {
        try {
            validate_tile_config(c, p, cc);
            return true;
        } catch (const Error &) {
            return false;
        }
    };
    std::vector<GemmTileConfig> out = {heuristic_tile_config(p, cc)};
    auto add = [&](const GemmTileConfig &c) {
        for (const GemmTileConfig &o : out)
            if (o == c) return;
        out.push_back(c);
    };
    if (wgmma_supports(p, cc)) {
        // Per (BLOCK_N, group, epilogue): the deepest ring that fits.
        for (int bn : {128, 256})
            for (int group : {8, 16})
                for (bool tma_store : {true, false}) {
                    GemmTileConfig w;
                    w.engine = GemmEngine::wgmma;
                    w.block_m = 128;
                    w.block_k = 64;
                    w.block_n = bn;
                    w.group_m = group;
                    w.tma_store = tma_store;
                    for (w.stages = 6; w.stages >= 2; --w.stages)
                        if (valid(w)) {
                            add(w);
                            break;
                        }
                }
        // Ping-pong consumers (block_n <= 128), for same_nk: their same_mn measured 0.6-0.8x.
        if (p.kind == GemmKind::same_nk)
            for (bool tma_store : {true, false}) {
                GemmTileConfig w = parse_tile_config("wgmma_128x128x64_g8_p1", "tuning candidate");
                w.tma_store = tma_store;
                for (w.stages = 6; w.stages >= 2; --w.stages)
                    if (valid(w)) {
                        add(w);
                        break;
                    }
            }
    } else {
        for (const char *t : {"128x128x64_s3_w2x4", "128x128x32_s4_w2x4", "64x128x32_s4_w2x4", "128x256x32_s3_w2x4_o1"}) {
            const GemmTileConfig c = parse_tile_config(t, "tuning candidate");
            if (valid(c)) add(c);
        }
    }
    return out;
}

TuningStore::TuningStore(std::string folder) : folder_(std::move(folder)) {}

std::string TuningStore::path_for(const std::string &key) const {
    if (folder_.empty()) return "";
    return (std::filesystem::path(folder_) / "tuning" / (to_hex(sha256(key)) + ".txt")).string();
}

std::optional<GemmTileConfig> TuningStore::find(const std::string &key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = winners_.find(key); it != winners_.end()) return it->second;
    if (absent_.count(key)) return std::nullopt;  // looked for once: no file I/O per launch
    const std::string path = path_for(key);
    // The same rules as cache entries: a trusted folder, a regular file (O_NOFOLLOW |
    // O_NONBLOCK, fstat) of bounded size; anything else is "no winner", never an error.
    std::vector<char> bytes;
    std::string why;
    if (!path.empty() && !untrusted_cache_folder(fs_parent(path)) &&
        read_regular_file(path, kMaxTuningFileBytes, bytes, why) == ReadStatus::ok) {
        std::istringstream in(std::string(bytes.begin(), bytes.end()));
        std::string magic, stored_key, config;
        if (std::getline(in, magic) && std::getline(in, stored_key) && std::getline(in, config) &&
            magic == kMagic && stored_key == key) {
            try {
                const GemmTileConfig c = parse_tile_config(config, path.c_str());
                winners_[key] = c;
                return c;
            } catch (const Error &) {
            }
        }
    }
    absent_.insert(key);
    return std::nullopt;
}

void TuningStore::save(const std::string &key, const GemmTileConfig &winner) {
    std::lock_guard<std::mutex> lock(mutex_);
    winners_[key] = winner;
    absent_.erase(key);
    const std::string path = path_for(key);
    if (path.empty()) return;
    // <cache>/tuning is created 0700 and must pass the cache's trust rules; the file is
    // published through the same atomic helper as cubin entries (unique O_EXCL temp file,
    // fsync, rename). An unwritable cache keeps the winner in memory only.
    const std::string folder = fs_parent(path);
    std::string why;
    if (!make_folders(folder, kCacheFolderMode, why) || untrusted_cache_folder(folder)) return;
    const std::string text = fmt::format("{}\n{}\n{}\n", kMagic, key, to_string(winner));
    write_file_atomic(path, {text}, why);
}

TuningStore &tuning_store(const std::string &folder) {
    static std::mutex mutex;
    static std::map<std::string, std::unique_ptr<TuningStore>> stores;
    std::lock_guard<std::mutex> lock(mutex);
    auto &slot = stores[folder];
    if (!slot) slot = std::make_unique<TuningStore>(folder);
    return *slot;
}

}  // namespace moejit
