#include "moe/plan_describe.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "gemm/tile_config.hpp"

namespace moejit {
namespace {

const char *on_off(bool on) { return on ? "on" : "off"; }

template <class T> void setting(std::string &out, const char *key, const std::string &value, const Setting<T> &s) {
    out += fmt::format("{}={}\n{}_from={}\n", key, value, key, source_name(s.from));
}

}  // namespace

std::string describe_plan(const Config &c, const std::string &arch, const PlanDesc &d,
                          const LayerSpecs &s) {
    std::string out = fmt::format("arch={}\n", arch);
    setting(out, "jit", on_off(c.jit.value), c.jit);
    setting(out, "tune", on_off(c.tuning()), c.tune);
    setting(out, "gather", on_off(s.gathered), c.gather);
    setting(out, "fuse_swiglu", on_off(s.fused_swiglu), c.fuse_swiglu);
    setting(out, "gemm_tile", c.gemm_tile.value ? to_string(forced_tile(c)->tile) : "heuristic", c.gemm_tile);
    // The tile of each GEMM the plan launches.
    std::vector<std::pair<const char *, const GemmTileConfig *>> tiles = {
        {"fc1", &s.fc1.tile}, {"fc2", &s.fc2.tile}, {"fc2_dgrad", &s.fc2_dgrad.tile}, {"fc1_dgrad", &s.fc1_dgrad.tile}};
    if (runs_fc1_dgrad_acc(d, s)) tiles.push_back({"fc1_dgrad_acc", &s.fc1_dgrad_acc.tile});
    tiles.push_back({"fc2_wgrad", &s.fc2_wgrad.tile});
    tiles.push_back({"fc1_wgrad", &s.fc1_wgrad.tile});
    // What the plan does: on where some GEMM's tile took the ring.
    const bool ring = std::any_of(tiles.begin(), tiles.end(), [](const auto &t) { return t.second->store_ring; });
    setting(out, "store_ring", on_off(ring), c.store_ring);
    for (const auto &[role, tile] : tiles) out += fmt::format("tile_{}={}\n", role, to_string(*tile));
    return out;
}

}  // namespace moejit
