// Opt-in tile tuning (options->tune or MOEJIT_TUNE=1, resolved per context: Config::tuning()
// in runtime/config.hpp): the first launch of a grouped-GEMM problem times a few
// candidate tiles on the caller's operands and keeps the fastest; winners persist as small
// files next to the cubin cache (<cache>/tuning/<sha256 of the key>.txt, atomic writes), so
// later processes and machines sharing the cache reuse them without timing anything.
// Pure host code (keys, candidates, the store); gemm/gemm_tuner.cpp does the timing.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gemm/tile_config.hpp"

namespace moejit {

// Canonical text of everything a winner depends on: kind, dtypes, sizes, layout, expert count,
// accumulate, the arch, and S rounded up to a power of two (one winner per size class).
std::string tuning_key(const GemmProblem &problem, std::int64_t rows, int compute_capability);

// The candidates timed for a problem: the heuristic's tile first, then the alternatives the
// engine offers (wgmma: BLOCK_N 128/256, ring depths, group sizes, the TMA-store epilogue
// where allowed; mma.sync: a few proven shapes). Every one validates for the problem.
std::vector<GemmTileConfig> tuning_candidates(const GemmProblem &problem, int compute_capability);

// Winners in memory, backed by files under `folder`/tuning ("" = memory only). Thread-safe.
// A file that does not parse or belongs to another key is ignored (and replaced on save); a
// key found without a file is not looked up on disk again by this store.
class TuningStore {
public:
    explicit TuningStore(std::string folder);
    std::optional<GemmTileConfig> find(const std::string &key);
    void save(const std::string &key, const GemmTileConfig &winner);
    std::string path_for(const std::string &key) const;  // "" when memory only

private:
    std::string folder_;
    std::mutex mutex_;
    std::unordered_map<std::string, GemmTileConfig> winners_;
    std::unordered_set<std::string> absent_;  // keys without a (valid) file
};

// One store per cache folder for the process.
TuningStore &tuning_store(const std::string &folder);

}  // namespace moejit
