#include "gemm/tile_config.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "base/error.hpp"

namespace moejit {

std::string to_string(const GemmTileConfig &c) {
    if (c.engine == GemmEngine::wgmma)
        return fmt::format("wgmma_{}x{}x{}_s{}_g{}{}{}{}", c.block_m, c.block_n, c.block_k, c.stages,
                           c.group_m, c.tma_store ? "_e1" : "", c.pingpong ? fmt::format("_p{}", c.pingpong) : "",
                           c.store_ring ? "_r1" : "");
    return fmt::format("{}x{}x{}_s{}_w{}x{}_g{}_o{}", c.block_m, c.block_n, c.block_k, c.stages,
                       c.warps_m, c.warps_n, c.group_m, c.min_blocks_per_sm);
}

namespace {

bool parse_int(std::string_view &text, int &out) {
    const char *end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, out);
    if (ec != std::errc() || ptr == text.data()) return false;
    text.remove_prefix(static_cast<std::size_t>(ptr - text.data()));
    return true;
}

bool consume(std::string_view &text, char c) {
    if (text.empty() || text.front() != c) return false;
    text.remove_prefix(1);
    return true;
}

}  // namespace

GemmTileConfig parse_tile_config(std::string_view text, const char *what) {
    const std::string original(text);
    auto bad = [&]() -> GemmTileConfig {
        fail(Status::invalid_argument,
             "{}: cannot parse tile config '{}' (expected [wgmma_]BMxBNxBK[_sSTAGES][_wWMxWN]"
             "[_gGROUP][_oMINBLOCKS][_e0|_e1][_p0|_p1|_p2][_r0|_r1], e.g. 128x128x32_s4_w2x4 or wgmma_128x256x64_s3_e1)",
             what, original);
    };
    GemmTileConfig c;
    if (text.starts_with("wgmma_")) {
        c.engine = GemmEngine::wgmma;
        c.stages = 4;
        text.remove_prefix(6);
    }
    if (!parse_int(text, c.block_m) || !consume(text, 'x') || !parse_int(text, c.block_n) ||
        !consume(text, 'x') || !parse_int(text, c.block_k))
        return bad();
    while (!text.empty()) {
        if (!consume(text, '_') || text.empty()) return bad();
        char field = text.front();
        text.remove_prefix(1);
        bool ok = false;
        switch (field) {
        case 's': ok = parse_int(text, c.stages); break;
        case 'w': ok = parse_int(text, c.warps_m) && consume(text, 'x') && parse_int(text, c.warps_n); break;
        case 'g': ok = parse_int(text, c.group_m); break;
        case 'o': ok = parse_int(text, c.min_blocks_per_sm); break;
        case 'e': {
            int epilogue = 0;
            ok = parse_int(text, epilogue) && (epilogue == 0 || epilogue == 1);
            c.tma_store = epilogue == 1;
            break;
        }
        case 'p': {
            ok = parse_int(text, c.pingpong) && c.pingpong >= 0 && c.pingpong <= 2;
            break;
        }
        case 'r': {
            int ring = 0;
            ok = parse_int(text, ring) && (ring == 0 || ring == 1);
            c.store_ring = ring == 1;
            break;
        }
        default: break;
        }
        if (!ok) return bad();
    }
    return c;
}

SmemLimits smem_limits(int cc) {
    constexpr std::size_t KiB = 1024;
    switch (cc) {
    case 80:
    case 87: return {163 * KiB, 164 * KiB};
    case 90:
    case 100:
    case 101:
    case 103: return {227 * KiB, 228 * KiB};
    default: return {99 * KiB, 100 * KiB};  // sm_86, sm_89, sm_120 and unknown: the small one
    }
}

std::size_t gemm_smem_bytes(const GemmTileConfig &c, GemmKind kind, std::int32_t num_experts) {
    const std::size_t stages = static_cast<std::size_t>(std::max(c.stages, 0));
    const std::size_t stage = static_cast<std::size_t>(c.block_m + c.block_n) * c.block_k * 2;
    std::size_t bytes = stage * stages;
    if (c.engine == GemmEngine::wgmma) {  // host mirror of templates/sm90/pipeline.cuh's layout
        bytes += 1024 + stages * 16 + 16 * sizeof(int);
        // C staging: 64 x BN per cooperative consumer (with the store ring: min(2, BN / 64) chunks
        // of 64 x 64), 128 x BN per ping-pong consumer, which also keep two turn mbarriers.
        if (c.tma_store && c.store_ring)
            bytes += static_cast<std::size_t>(c.block_m / 64) * std::min(2, c.block_n / 64) * 64 * 64 * 2;
        else if (c.tma_store)
            bytes += static_cast<std::size_t>(c.block_m) * c.block_n * 2 * (c.pingpong ? 2 : 1);
        if (c.pingpong) bytes += 16;
        // same_mn: cum_items[E+1] and cum_slots[E+1] of the split schedule
        if (kind == GemmKind::same_mn)
            bytes += 2 * (static_cast<std::size_t>(std::max(num_experts, 0)) + 1) * sizeof(int);
    }
    if (kind == GemmKind::same_nk)
        bytes += (static_cast<std::size_t>(std::max(num_experts, 0)) + 1) * sizeof(int);
    return (bytes + 15) / 16 * 16;
}

int deepest_stages(GemmTileConfig c, GemmKind kind, std::int32_t num_experts, int cc, int min_stages) {
    for (c.stages = 6; c.stages >= min_stages; --c.stages)
        if (gemm_smem_bytes(c, kind, num_experts) <= smem_limits(cc).per_block) return c.stages;
    return 0;
}

namespace {

// Static shared memory of the kernels (the scan's per-warp sums), plus slack.
constexpr std::size_t kStaticSmem = 256;

bool one_of(int v, std::initializer_list<int> allowed) {
    return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

}  // namespace

bool wgmma_supports(const GemmProblem &, int cc) { return cc == 90; }

namespace {

void validate_wgmma_config(const GemmTileConfig &c, const GemmProblem &p, int cc) {
    // The name is built only on failure: a valid config is checked on every launch.
    auto unsupported = [&](std::string_view why) {
        fail(Status::unsupported, "grouped GEMM tile config {}: {}", to_string(c), why);
    };
    if (cc != 90) unsupported(fmt::format("the wgmma engine needs sm_90a, the target is sm_{}", cc));
    if (c.block_m != 128) unsupported("block_m must be 128 for the wgmma engine");
    if (c.block_k != 64) unsupported("block_k must be 64 for the wgmma engine");
    if (!one_of(c.block_n, {64, 128, 256})) unsupported("block_n must be 64, 128 or 256");
    if (c.stages < 2 || c.stages > 8) unsupported("stages must be in [2, 8]");
    if (c.group_m < 1 || c.group_m > 64) unsupported("group_m must be in [1, 64]");
    if (c.tma_store && (p.c_dtype == DType::fp32 || p.accumulate))
        unsupported("the TMA-store epilogue (_e1) needs a 16-bit C and no accumulation");
    if (c.pingpong && c.block_n > 128)
        unsupported("ping-pong consumers (_p1/_p2) hold a whole 128 x block_n tile each: block_n must be 64 or 128");
    if (c.pingpong && p.swiglu) unsupported("the SwiGLU epilogue runs on cooperative consumers (_p0)");
    if (c.store_ring && (!c.tma_store || c.pingpong))
        unsupported("the store ring (_r1) is the cooperative TMA-store epilogue's: it needs _e1 and _p0");
    if (c.tma_store && p.swiglu && c.block_n < 128)
        unsupported("the SwiGLU epilogue's TMA stores (_e1) need block_n >= 128 (whole 64-column chunks of g and u)");
    if (p.kind == GemmKind::same_nk && (p.num_experts < 1 || p.num_experts > 65536))
        unsupported("same_nk supports 1 to 65536 experts");
    const std::size_t smem = gemm_smem_bytes(c, p.kind, p.num_experts);
    if (smem > smem_limits(cc).per_block)
        unsupported(fmt::format("needs {} bytes of shared memory with {} experts, sm_{} allows {} "
                                "per block",
                                smem, p.num_experts, cc, smem_limits(cc).per_block));
}

}  // namespace

void require_engine_features(const GemmTileConfig &c, const GemmProblem &p) {
    if (c.engine == GemmEngine::wgmma) return;
    if (p.gather_a)
        fail(Status::unsupported, "grouped GEMM tile config {}: gathered A rows need the wgmma engine "
             "(an sm_90a tile)", to_string(c));
    if (p.k_split > 0)
        fail(Status::unsupported, "grouped GEMM tile config {}: two operand pairs (k_split = {}) need the "
             "wgmma engine (an sm_90a tile)", to_string(c), p.k_split);
    if (p.swiglu)
        fail(Status::unsupported, "grouped GEMM tile config {}: the SwiGLU epilogue needs the wgmma engine "
             "(an sm_90a tile)", to_string(c));
}

void validate_tile_config(const GemmTileConfig &c, const GemmProblem &p, int cc) {
    require_engine_features(c, p);
    if (c.engine == GemmEngine::wgmma) return validate_wgmma_config(c, p, cc);
    // The name is built only on failure: a valid config is checked on every launch.
    auto unsupported = [&](std::string_view why) {
        fail(Status::unsupported, "grouped GEMM tile config {}: {}", to_string(c), why);
    };
    if (cc < 80)
        fail(Status::unsupported,
             "grouped GEMM: compute capability {} is not supported (needs sm_80 or newer for "
             "bf16/fp16 mma.sync m16n8k16)",
             cc);
    if (!one_of(c.block_m, {32, 64, 128, 256})) unsupported("block_m must be 32, 64, 128 or 256");
    if (!one_of(c.block_n, {32, 64, 128, 256})) unsupported("block_n must be 32, 64, 128 or 256");
    if (!one_of(c.block_k, {32, 64})) unsupported("block_k must be 32 or 64");
    if (c.stages < 2 || c.stages > 8) unsupported("stages must be in [2, 8]");
    if (!one_of(c.warps_m * c.warps_n, {4, 8}) || c.warps_m < 1 || c.warps_n < 1)
        unsupported("warps_m * warps_n must be 4 or 8");
    if (c.block_m % (16 * c.warps_m) != 0 || c.block_n % (16 * c.warps_n) != 0)
        unsupported("the warp tile (block / warps) must be a multiple of 16 in M and N");
    if (c.group_m < 1 || c.group_m > 64) unsupported("group_m must be in [1, 64]");
    if (c.min_blocks_per_sm < 1 || c.min_blocks_per_sm > 4)
        unsupported("min_blocks_per_sm must be in [1, 4]");
    if (c.tma_store) unsupported("the TMA-store epilogue (_e1) belongs to the wgmma engine");
    if (c.store_ring) unsupported("the store ring (_r1) belongs to the wgmma engine");
    if (c.pingpong) unsupported("ping-pong consumers (_p1/_p2) belong to the wgmma engine");
    const int threads = c.threads();
    // Every thread issues the same number of 16-byte copies per operand tile.
    if ((c.block_m * c.block_k / 8) % threads != 0 || (c.block_n * c.block_k / 8) % threads != 0)
        unsupported(fmt::format("each operand tile must hold a multiple of {} 16-byte chunks",
                                threads));
    // Accumulators plus ~48 registers of fragments and addresses must fit the register cap
    // implied by __launch_bounds__(threads, min_blocks), or ptxas spills.
    const int reg_cap = std::min(255, 65536 / (threads * c.min_blocks_per_sm) / 8 * 8);
    const int acc_regs = c.block_m * c.block_n / threads;
    if (acc_regs + 48 > reg_cap)
        unsupported(fmt::format("{} accumulator registers per thread exceed the cap of {} at "
                                "{} blocks per SM (use a smaller tile or min_blocks_per_sm)",
                                acc_regs, reg_cap, c.min_blocks_per_sm));
    if (p.kind == GemmKind::same_nk && (p.num_experts < 1 || p.num_experts > 65536))
        unsupported("same_nk supports 1 to 65536 experts");
    const std::size_t smem = gemm_smem_bytes(c, p.kind, p.num_experts) + kStaticSmem;
    const SmemLimits limits = smem_limits(cc);
    if (smem > limits.per_block)
        unsupported(fmt::format("needs {} bytes of shared memory, sm_{} allows {} per block",
                                smem, cc, limits.per_block));
}

int blocks_per_sm(const GemmTileConfig &c, GemmKind kind, std::int32_t num_experts, int cc) {
    if (c.engine == GemmEngine::wgmma) return 1;  // the kernel takes the whole register file
    const std::size_t smem = gemm_smem_bytes(c, kind, num_experts) + kStaticSmem + 1024;
    const int by_smem = static_cast<int>(smem_limits(cc).per_sm / smem);
    return std::max(1, std::min(c.min_blocks_per_sm, by_smem));
}

namespace {

// wgmma tiles: BLOCK_M 128 (two 64-row consumer warpgroups), BLOCK_K 64 (one 128-byte swizzle
// row), BLOCK_N 256 (the narrowest of 64/128/256 that covers N when N is smaller, so a narrow
// output does not compute padding), the TMA-store epilogue whenever C is 16-bit and not
// accumulated (the store of one tile overlaps the next tile's wgmmas: short-K GEMMs such as
// weight gradients of small experts are epilogue-bound otherwise), and the deepest ring
// (<= 6 stages, >= 3 or the TMA-store epilogue is dropped) that fits next to the scheduler's
// cum[E+1]. Measured on an H200 (docs/PERF_LOG.md, v0.2 sweep): 128x256 with 4
// stages is within 4 % of the best of {128x128 s4, 128x256 s3/s4} on every forward GEMM of
// the reference shapes and 5-10 % ahead of 128x128 on most (more FLOPs per byte of smem read).
std::optional<GemmTileConfig> wgmma_heuristic(const GemmProblem &p, int cc) {
    GemmTileConfig w;
    w.engine = GemmEngine::wgmma;
    w.block_m = 128;
    w.block_k = 64;
    w.block_n = p.n > 0 && p.n <= 64 ? 64 : p.n > 0 && p.n <= 128 ? 128 : 256;
    const auto deepest_ring = [&](int min_stages) {
        const int stages = deepest_stages(w, p.kind, p.num_experts, cc, min_stages);
        w.stages = stages > 0 ? stages : min_stages;
        return stages > 0;
    };
    // Cooperative consumers: ping-pong 128x128 (_p1) led on 12 of 21 standalone same_nk GEMMs by
    // 2-10 %, but the layer with it picked for every same_nk by that split ran 6-11 % slower
    // (docs/PERF_LOG.md 0.7.0, device run 4), and ping-pong weight gradients run at 0.6-0.8x.
    // It is a tuning candidate (tuning_candidates) and can be forced (gemm_tile).
    w.tma_store = p.c_dtype != DType::fp32 && !p.accumulate && !(p.swiglu && w.block_n < 128);
    if (!w.tma_store || !deepest_ring(3)) {
        w.tma_store = false;
        deepest_ring(2);
    }
    try {
        validate_tile_config(w, p, cc);
    } catch (const Error &) {
        return std::nullopt;  // e.g. too many experts for cum[] next to two stages
    }
    return w;
}

}  // namespace

// The heuristic. Why these tiles (measured on an H200 with tools/bench_group_gemm.py):
//  - 128x128x64, 3 stages, 8 warps of 64x32, 2 CTAs per SM (96 KiB shared memory each): the
//    best mma.sync config on every reference shape (fc1 fprop 260-370 TFLOP/s, 0.54-0.65x
//    torch._grouped_mm), ~10 % ahead of 128x128x32 with 4 stages (half the barriers and
//    address updates per FLOP), of 64x128 / 128x64 tiles, of 4 stages at 1 CTA per SM, and of
//    128x256 / 256x128 tiles (too few warps per SM to hide ldmatrix and barrier latency).
//  - Few rows per expert (S/E <= 64, small batches): BLOCK_M = 64 halves the padding rows
//    each expert's last tile computes for nothing.
//  - Narrow outputs (N <= 64): BLOCK_N = 64 for the same reason in N.
//  - Arches with 99 KiB of shared memory per block (sm_86/89/120): BLOCK_K = 32, 3 stages
//    (48 KiB), so that two CTAs still fit an SM.
//
// On sm_90a the wgmma engine runs every problem it supports (see wgmma_heuristic).
GemmTileConfig heuristic_tile_config(const GemmProblem &p, int cc) {
    if (wgmma_supports(p, cc)) {
        if (std::optional<GemmTileConfig> w = wgmma_heuristic(p, cc)) return *w;
    }
    GemmTileConfig c;
    const std::int64_t out_rows = p.kind == GemmKind::same_mn ? p.m : 0;
    if (p.kind == GemmKind::same_nk && p.rows_hint > 0 && p.num_experts > 0 &&
        p.rows_hint / p.num_experts <= 64) {
        c.block_m = 64;
        c.warps_m = 2;
        c.warps_n = 4;
    }
    if (p.kind == GemmKind::same_mn && out_rows > 0 && out_rows <= 64) {
        c.block_m = 64;
    }
    if (p.n > 0 && p.n <= 64) {
        c.block_n = 64;
        c.warps_m = c.block_m >= 128 ? 4 : 2;
        c.warps_n = 8 / c.warps_m;
    }
    if (smem_limits(cc).per_block < 160 * 1024) {
        c.block_k = 32;
        c.stages = 3;
    }
    // Fall back to smaller tiles until valid (e.g. a huge expert count on a small-smem arch).
    try {
        validate_tile_config(c, p, cc);
    } catch (const Error &) {
        c.stages = 2;
        c.min_blocks_per_sm = 1;
    }
    return c;
}

std::optional<ForcedTile> forced_tile(const Config &config) {
    const auto &text = config.gemm_tile.value;
    if (!text) return std::nullopt;
    return ForcedTile{parse_tile_config(text->text.c_str(), text->origin.c_str()), text->origin};
}

void check_forced_tiles(const Config &config) {
    if (auto env = read_environment().gemm_tile) parse_tile_config(env->c_str(), "environment variable MOEJIT_GEMM_TILE");
    forced_tile(config);
}

GemmTileConfig choose_tile_config(const GemmProblem &p, int cc, const ForcedTile *forced) {
    if (forced) {
        // A forced tile must fit the problem now (at plan creation), not fail in NVRTC or at
        // launch later, nor let a warmup "succeed" with kernels that can never run.
        try {
            validate_tile_config(forced->tile, p, cc);
        } catch (const Error &e) {
            fail(Status::unsupported, "{}={} cannot run this GEMM on compute capability {}.{}: {} (unset it to "
                 "use the heuristic)",
                 forced->origin, to_string(forced->tile), cc / 10, cc % 10, e.what());
        }
        return forced->tile;
    }
    return heuristic_tile_config(p, cc);
}

}  // namespace moejit
