// The fused MoE layer's regression suite (docs/DESIGN.md §2-3), through the public C ABI
// (moejit_plan_create / forward / backward, saved and workspace buffers from the size queries),
// against the float64 reference of tests/support/reference_moe.hpp.
//
// Every case runs split and merged fc1 on the same inputs. Before each run EVERY output and
// gradient, the saved buffer and the workspace are NaN-poisoned (0xFF bytes; accumulated weight
// gradients are prefilled with random fp32 instead); afterwards every output must be finite and
// match the reference, and so must the intermediates the plan keeps in `saved` and `workspace`
// (located through moejit::PlanLayout), which pins a failure to its stage. Split and merged must
// agree bitwise on the forward output, d_routing_weights and the weight gradients (each element
// is the same fp32 reduction in the same order) and within rounding on dx (split fc1 accumulates
// dxs in the layer dtype in two GEMMs). Then: bitwise determinism across two runs, a CUDA graph
// replayed on new data equal bitwise to eager, and a proof that these same checks fail when the
// backward GEMMs take their per-expert row bound from T (the historical bug).
//
// Each case prints one summary line per layout (relative errors per tensor). MOEJIT_TEST_SEED
// reproduces a run.
#include "gpu_main.hpp"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "moe/plan.hpp"
#include "moe/plan_layout.hpp"
#include "capi_convert.hpp"  // the cases' C descriptors, as the library's (PlanLayout)
#include "compile_only.hpp"
#include "layer_args.h"
#include "reference_moe.hpp"
#include "stale_bound_plan.hpp"

MOEJIT_GPU_TEST_MAIN("moe_layer_gpu")

using namespace moejit::test;

namespace {

// ---------------------------------------------------------------- tolerances
//
// ‖device − ref‖/‖ref‖ per tensor. The reference rounds every tensor the device stores in the
// layer dtype at the same place (reference_moe.hpp), so what remains are 1-ulp flips where the
// device's fp32 (tensor-core) accumulation and the reference's float64 round to different
// neighbours (bf16 ulp 2^-8; a few % of the elements of a GEMM output over K = 2048), plus,
// with a SwiGLU limit, the rare g or u whose flip crosses ±L and changes a mask.
// Measured on an H200 (2026-11, every case below): at most 9.6e-4 (DeepSeek-V2-Lite dx; out
// 7.6e-4, d_routing_weights 5.9e-4, weight gradients ≤ 2.3e-4), ≤ 3e-4 on the mid-size
// cases with limits 7 and 10, ≤ 1.2e-4 in fp16. 5e-3 keeps a 5x margin and is still 100x
// below what a skipped or stale row block does (non-finite, or ≥ 0.3 relative); a systematic
// extra rounding (e.g. aw rounded twice) of ~1e-3 on every element stays visible in the log.
// fp16 has 3 more mantissa bits.
// Per expert (weight gradients): the worst expert's own relative error (measured ≤ 5.4e-4); a
// wrong or missing expert gives ~1 there even when the whole-tensor error is diluted by E.
// Split vs merged dx: split fc1 rounds dg·W_gate to the layer dtype before adding du·W_up, so
// the layouts differ by one extra rounding (measured 2.9e-3 bf16, 3.4e-4 fp16): 4x the tolerance.
constexpr double kTolBf16 = 5e-3, kTolBf16Expert = 2e-2;
constexpr double kTolFp16 = 2e-3, kTolFp16Expert = 1e-2;
constexpr double kLayoutDxFactor = 4.0;

// ---------------------------------------------------------------- parallel random data

unsigned threads() { return ref_threads(); }

// Calls fn(begin, end) over [0, n) in chunks on all cores.
template <class F> void parallel_range(std::size_t n, F &&fn, std::size_t chunk = std::size_t{1} << 16) {
    const std::size_t chunks = (n + chunk - 1) / chunk;
    parallel_tasks(chunks, threads(), [&](std::size_t c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); });
}

inline std::uint64_t mix64(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// Counter-based: element i of stream `tag` (reproducible whatever the thread count).
inline std::uint64_t rand64(std::uint64_t seed, std::uint64_t tag, std::uint64_t i) {
    return mix64(mix64(seed ^ mix64(tag)) + i);
}
inline double uniform01(std::uint64_t seed, std::uint64_t tag, std::uint64_t i) {
    return static_cast<double>(rand64(seed, tag, i) >> 11) * 0x1.0p-53;
}
// Unit-variance, roughly normal (sum of four uniforms): cheap enough for 10^9 elements.
inline double normalish(std::uint64_t seed, std::uint64_t tag, std::uint64_t i) {
    const std::uint64_t h = rand64(seed, tag, i);
    const double s = static_cast<double>((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48));
    return (s / 65536.0 - 2.0) * 1.7320508075688772;
}

enum Tag : std::uint64_t { kX = 1, kWGate, kWUp, kWDown, kDout, kLogits, kSel, kWeights, kPrefill };

// A half-precision tensor: the device bits and their exact values.
struct HostHalf {
    std::vector<std::uint16_t> bits;
    std::vector<float> values;
};

HostHalf random_tensor(std::size_t n, moejit_dtype_t dtype, std::uint64_t seed, std::uint64_t tag, double scale) {
    HostHalf t;
    t.bits.resize(n);
    t.values.resize(n);
    parallel_range(n, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
            t.bits[i] = to_half_bits(static_cast<float>(normalish(seed, tag, i) * scale), dtype);
            t.values[i] = from_half_bits(t.bits[i], dtype);
        }
    });
    return t;
}

// ---------------------------------------------------------------- a case

enum class Routing {
    all_to_expert0,  // the seed: selected_experts = 0, routing_weights = 0.75
    softmax_topk,    // top-k of random logits over `active`, softmax-normalised over the k
    uniform,         // each route uniform over `active`, duplicates allowed; weights in [0.1,1)
};

struct LayerCase {
    std::string name;
    std::int64_t T = 0, H = 0, I = 0;
    std::int32_t E = 0, k = 0;
    moejit_dtype_t dtype = MOEJIT_DTYPE_BF16;
    float limit = 0.0f;
    moejit_dtype_t index_dtype = MOEJIT_DTYPE_INT64;
    moejit_dtype_t routing_dtype = MOEJIT_DTYPE_FP32;
    moejit_dtype_t wgrad_dtype = MOEJIT_DTYPE_FP32;
    bool accumulate = false;
    Routing routing = Routing::softmax_topk;
    std::vector<std::int32_t> active;  // experts routes may use (empty: all)
    const char *tile = nullptr;        // options->gemm_tile of the plan's context (NULL: as gpu_context())
    bool fuse_swiglu = false;          // options->fuse_swiglu on for the plan's context
    std::int64_t tokens_hint = 0;
    double fc1_scale = 1.0;  // standard deviation of g and u
    bool rw_in_backward = false;  // desc->routing_weights_in_backward (0.14): saved keeps no w_s

    std::int64_t S() const { return T * k; }
    double tol() const { return dtype == MOEJIT_DTYPE_FP16 ? kTolFp16 : kTolBf16; }
    double expert_tol() const { return dtype == MOEJIT_DTYPE_FP16 ? kTolFp16Expert : kTolBf16Expert; }
};

const char *layout_name(moejit_fc1_layout_t l) { return l == MOEJIT_FC1_MERGED ? "merged" : "split"; }

Storage storage_of(moejit_dtype_t d) {
    return d == MOEJIT_DTYPE_BF16 ? Storage::bf16 : d == MOEJIT_DTYPE_FP16 ? Storage::fp16 : Storage::fp32;
}
std::size_t size_of(moejit_dtype_t d) {
    return d == MOEJIT_DTYPE_FP32 || d == MOEJIT_DTYPE_INT32 ? 4 : d == MOEJIT_DTYPE_INT64 ? 8 : 2;
}

moejit_plan_desc_t desc_of(const LayerCase &c, moejit_fc1_layout_t layout) {
    moejit_plan_desc_t d;
    MOEJIT_TEST_OK(layer_desc_init(&d, c.H, c.I, c.E, c.k));
    d.dtype = c.dtype;
    d.fc1_layout = layout;
    d.activation = MOEJIT_ACTIVATION_SWIGLU;
    d.swiglu_limit = c.limit;
    d.weight_grad_dtype = c.wgrad_dtype;
    d.weight_grad_accumulate = c.accumulate ? 1 : 0;
    d.index_dtype = c.index_dtype;
    d.routing_dtype = c.routing_dtype;
    d.tokens_hint = c.tokens_hint;
    d.routing_weights_in_backward = c.rw_in_backward ? 1 : 0;
    return d;
}

// ---------------------------------------------------------------- host data

struct HostLayer {
    HostHalf x, w_gate, w_up, w_down, dout;  // x, dout [T,H]; w_gate, w_up [E,I,H]; w_down [E,H,I]
    std::vector<std::int64_t> selected;      // [T,k]
    std::vector<float> weights;              // [T,k], exact values of the routing dtype
    std::vector<float> prefill_gate, prefill_up, prefill_down;  // accumulate: dW before the call
};

float round_to(double v, moejit_dtype_t d) { return store_as(v, storage_of(d)); }

void make_routing(const LayerCase &c, std::uint64_t seed, HostLayer &h) {
    const std::int64_t T = c.T, k = c.k;
    h.selected.assign(T * k, 0);
    h.weights.assign(T * k, 0.0f);
    std::vector<std::int32_t> experts = c.active;
    if (experts.empty()) {
        experts.resize(c.E);
        std::iota(experts.begin(), experts.end(), 0);
    }
    const std::int64_t n = static_cast<std::int64_t>(experts.size());
    if (c.routing == Routing::softmax_topk && n < k) throw std::invalid_argument("softmax_topk needs k <= active experts");
    std::vector<std::pair<double, std::int32_t>> logits(n);
    for (std::int64_t t = 0; t < T; ++t) {
        switch (c.routing) {
        case Routing::all_to_expert0:
            for (std::int64_t j = 0; j < k; ++j) h.weights[t * k + j] = round_to(0.75, c.routing_dtype);
            break;
        case Routing::softmax_topk: {
            for (std::int64_t e = 0; e < n; ++e)
                logits[e] = {normalish(seed, kLogits, t * c.E + experts[e]), experts[e]};
            std::partial_sort(logits.begin(), logits.begin() + k, logits.end(),
                              [](const auto &a, const auto &b) { return a.first > b.first; });
            double sum = 0;
            for (std::int64_t j = 0; j < k; ++j) sum += std::exp(logits[j].first - logits[0].first);
            for (std::int64_t j = 0; j < k; ++j) {
                h.selected[t * k + j] = logits[j].second;
                h.weights[t * k + j] = round_to(std::exp(logits[j].first - logits[0].first) / sum, c.routing_dtype);
            }
            break;
        }
        case Routing::uniform:
            for (std::int64_t j = 0; j < k; ++j) {
                h.selected[t * k + j] = experts[rand64(seed, kSel, t * k + j) % n];
                h.weights[t * k + j] = round_to(0.1 + 0.9 * uniform01(seed, kWeights, t * k + j), c.routing_dtype);
            }
            break;
        }
    }
}

HostLayer make_host_layer(const LayerCase &c, std::uint64_t seed) {
    HostLayer h;
    const std::size_t E = c.E, H = c.H, I = c.I, T = c.T;
    h.x = random_tensor(T * H, c.dtype, seed, kX, 1.0);
    h.dout = random_tensor(T * H, c.dtype, seed, kDout, 1.0);
    h.w_gate = random_tensor(E * I * H, c.dtype, seed, kWGate, c.fc1_scale / std::sqrt(double(H)));
    h.w_up = random_tensor(E * I * H, c.dtype, seed, kWUp, c.fc1_scale / std::sqrt(double(H)));
    h.w_down = random_tensor(E * H * I, c.dtype, seed, kWDown, 1.0 / std::sqrt(double(I)));
    make_routing(c, seed, h);
    if (c.accumulate) {
        auto prefill = [&](std::vector<float> &v, std::uint64_t part) {
            v.resize(E * I * H);
            parallel_range(v.size(), [&](std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i) v[i] = static_cast<float>(normalish(seed, kPrefill + part, i));
            });
        };
        prefill(h.prefill_gate, 10);
        prefill(h.prefill_up, 20);
        prefill(h.prefill_down, 30);
    }
    return h;
}

// [E,I,H] gate and up -> [E,2I,H], gate rows first.
template <class V> std::vector<V> merge_rows(const std::vector<V> &gate, const std::vector<V> &up, const LayerCase &c) {
    const std::size_t block = std::size_t(c.I) * c.H;
    std::vector<V> merged(2 * gate.size());
    parallel_tasks(std::size_t(c.E), threads(), [&](std::size_t e) {
        std::copy_n(gate.begin() + e * block, block, merged.begin() + 2 * e * block);
        std::copy_n(up.begin() + e * block, block, merged.begin() + (2 * e + 1) * block);
    });
    return merged;
}

MoeRefResult reference_of(const LayerCase &c, const HostLayer &h) {
    const MoeRefConfig cfg{.tokens = c.T, .hidden = c.H, .intermediate = c.I, .experts = c.E, .top_k = c.k,
                           .limit = c.limit, .dtype = storage_of(c.dtype),
                           .routing = storage_of(c.routing_dtype)};
    MoeRefInputs in{h.x.values, h.selected, h.weights, h.w_gate.values, h.w_up.values, h.w_down.values,
                    h.dout.values};
    return moe_reference(cfg, in);
}

// ---------------------------------------------------------------- device buffers

// Allocates on first use, later writes into the same allocation (the graph test needs that).
template <class V> void put(DeviceBuffer &b, const std::vector<V> &host) {
    if (b.bytes() == 0 && !host.empty()) {
        b = DeviceBuffer::from(host);
    } else {
        if (b.bytes() != host.size() * sizeof(V)) throw std::logic_error("put: size changed");
        b.upload(host);
    }
}

struct DeviceInputs {
    DeviceBuffer x, selected, weights, w_gate, w_up, w_gate_up, w_down, dout;

    void upload(const LayerCase &c, const HostLayer &h) {
        put(x, h.x.bits);
        put(dout, h.dout.bits);
        put(w_gate, h.w_gate.bits);
        put(w_up, h.w_up.bits);
        put(w_down, h.w_down.bits);
        put(w_gate_up, merge_rows(h.w_gate.bits, h.w_up.bits, c));
        if (c.index_dtype == MOEJIT_DTYPE_INT64) {
            put(selected, h.selected);
        } else {
            put(selected, std::vector<std::int32_t>(h.selected.begin(), h.selected.end()));
        }
        if (c.routing_dtype == MOEJIT_DTYPE_FP32) {
            put(weights, h.weights);
        } else {
            std::vector<std::uint16_t> bits(h.weights.size());
            for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = to_half_bits(h.weights[i], c.routing_dtype);
            put(weights, bits);
        }
    }
};

struct PlanHandle {
    moejit_plan_t plan = nullptr;
    moejit_context_t context = nullptr;  // the case's own context (a forced tile, fused SwiGLU), or null
    PlanHandle() = default;
    PlanHandle(const PlanHandle &) = delete;
    PlanHandle &operator=(const PlanHandle &) = delete;
    ~PlanHandle() {
        moejit_plan_destroy(plan);
        moejit_context_destroy(context);  // after its plan
    }
};

// The configuration is the context's (options over the environment, fixed at creation): a case
// with its own tile or fused SwiGLU gets a context of its own, with those options, on the same
// device and cache folder as gpu_context(). stale_bound: the plan has the historical bug
// (stale_bound_plan.hpp).
void create_plan(PlanHandle &p, const LayerCase &c, moejit_fc1_layout_t layout, bool stale_bound = false) {
    moejit_context_t context = gpu_context();
    if (c.tile || c.fuse_swiglu) {
        moejit_context_options_t o;
        MOEJIT_TEST_OK(moejit_context_options_init(&o));
        o.gemm_tile = c.tile;
        o.fuse_swiglu = c.fuse_swiglu ? MOEJIT_SWITCH_ON : MOEJIT_SWITCH_FROM_ENV;
        MOEJIT_TEST_OK(moejit_context_create(&o, &p.context));
        context = p.context;
    }
    const moejit_plan_desc_t d = desc_of(c, layout);
    if (stale_bound)
        p.plan = create_stale_bound_plan(context, d);
    else
        MOEJIT_TEST_OK(moejit_plan_create(context, &d, &p.plan));
}

struct DeviceOutputs {
    DeviceBuffer out, dx, d_weights, dw_gate, dw_up, dw_gate_up, dw_down, saved, workspace;
};

DeviceOutputs allocate_outputs(const LayerCase &c, moejit_fc1_layout_t layout, moejit_plan_t plan) {
    DeviceOutputs o;
    std::size_t saved = 0, workspace = 0;
    MOEJIT_TEST_OK(moejit_plan_saved_size(plan, c.T, &saved));
    MOEJIT_TEST_OK(moejit_plan_workspace_size(plan, c.T, &workspace));
    o.saved = DeviceBuffer(saved);
    o.workspace = DeviceBuffer(workspace);
    const std::size_t el = size_of(c.dtype), w = std::size_t(c.E) * c.I * c.H * size_of(c.wgrad_dtype);
    o.out = DeviceBuffer(std::size_t(c.T) * c.H * el);
    o.dx = DeviceBuffer(std::size_t(c.T) * c.H * el);
    o.d_weights = DeviceBuffer(std::size_t(c.S()) * size_of(c.routing_dtype));
    if (layout == MOEJIT_FC1_MERGED) {
        o.dw_gate_up = DeviceBuffer(2 * w);
    } else {
        o.dw_gate = DeviceBuffer(w), o.dw_up = DeviceBuffer(w);
    }
    o.dw_down = DeviceBuffer(w);
    return o;
}

// NaN everywhere the layer writes; accumulated weight gradients get their prefill instead.
void prepare(const LayerCase &c, moejit_fc1_layout_t layout, const HostLayer &h, DeviceOutputs &o) {
    for (DeviceBuffer *b : {&o.out, &o.dx, &o.d_weights, &o.saved, &o.workspace}) b->poison();
    if (!c.accumulate) {
        for (DeviceBuffer *b : {&o.dw_gate, &o.dw_up, &o.dw_gate_up, &o.dw_down}) b->poison();
        return;
    }
    if (layout == MOEJIT_FC1_MERGED) {
        o.dw_gate_up.upload(merge_rows(h.prefill_gate, h.prefill_up, c));
    } else {
        o.dw_gate.upload(h.prefill_gate);
        o.dw_up.upload(h.prefill_up);
    }
    o.dw_down.upload(h.prefill_down);
}

moejit_forward_args_t forward_args(const LayerCase &c, moejit_fc1_layout_t layout, DeviceInputs &in, DeviceOutputs &o,
                                   void *stream) {
    moejit_forward_args_t a;
    moejit_forward_args_init(&a);
    a.num_tokens = c.T;
    a.x = in.x.get();
    a.selected_experts = in.selected.get();
    a.routing_weights = in.weights.get();
    if (layout == MOEJIT_FC1_MERGED) {
        a.w_gate_up = in.w_gate_up.get();
    } else {
        a.w_gate = in.w_gate.get(), a.w_up = in.w_up.get();
    }
    a.w_down = in.w_down.get();
    a.out = o.out.get();
    a.saved = o.saved.get(), a.saved_size = o.saved.bytes();
    a.workspace = o.workspace.get(), a.workspace_size = o.workspace.bytes();
    a.stream = stream;
    return a;
}

moejit_status_t forward(moejit_plan_t plan, const LayerCase &c, moejit_fc1_layout_t layout, DeviceInputs &in,
                        DeviceOutputs &o, void *stream) {
    const moejit_forward_args_t a = forward_args(c, layout, in, o, stream);
    return moejit_plan_forward(plan, &a);
}

// Set by the consuming-backward case: backward() passes consume_saved = 1 with only
// moejit_plan_consuming_workspace_size bytes of workspace.
bool g_consume_saved = false;
// Set by the parts case: backward() runs moejit_plan_backward_part's DOWN then UP, each in a
// buffer of exactly its own workspace size (compute-sanitizer sees a write past it), each
// without the pointers the other part owns. dx is still the NaN prepare() left when UP starts
// (its scratch), so the check of dx proves UP's gather wrote all of it.
bool g_backward_parts = false;

moejit_status_t backward_in_parts(moejit_plan_t plan, std::int64_t T, const moejit_backward_args_t &a) {
    moejit_backward_args_t down = a, up = a;
    down.consume_saved = up.consume_saved = 1;
    MOEJIT_TEST_OK(moejit_plan_backward_part_workspace_size(plan, T, MOEJIT_BACKWARD_PART_DOWN, &down.workspace_size));
    MOEJIT_TEST_OK(moejit_plan_backward_part_workspace_size(plan, T, MOEJIT_BACKWARD_PART_UP, &up.workspace_size));
    const DeviceBuffer down_ws(down.workspace_size), up_ws(up.workspace_size);
    down.workspace = down_ws.get(), up.workspace = up_ws.get();
    down.x = nullptr, down.dx = nullptr, down.w_gate = down.w_up = down.w_gate_up = nullptr;
    down.dw_gate = down.dw_up = down.dw_gate_up = nullptr, down.db_gate_up = nullptr;
    up.dout = nullptr, up.routing_weights = nullptr, up.d_routing_weights = nullptr, up.w_down = nullptr;
    up.dw_down = nullptr, up.b_down = nullptr, up.db_down = nullptr;
    moejit_status_t s = moejit_plan_backward_part(plan, MOEJIT_BACKWARD_PART_DOWN, &down);
    if (s == MOEJIT_SUCCESS) s = moejit_plan_backward_part(plan, MOEJIT_BACKWARD_PART_UP, &up);
    synchronize();  // the workspaces outlive the parts' kernels
    return s;
}

// The forward's inputs, saved and workspace (layer_args.h), and the gradients' buffers.
moejit_status_t backward(moejit_plan_t plan, const LayerCase &c, moejit_fc1_layout_t layout, DeviceInputs &in,
                         DeviceOutputs &o, void *stream) {
    const moejit_forward_args_t f = forward_args(c, layout, in, o, stream);
    moejit_backward_args_t a;
    layer_backward_args(&f, &a);
    // A plan that keeps w_s (0.13's layout, the default) must not read the routing weights in
    // the backward: a 0.13 caller may pass none (the ABI promise of routing_weights_in_backward).
    if (!c.rw_in_backward) a.routing_weights = nullptr;
    if (g_consume_saved) {
        a.consume_saved = 1;
        MOEJIT_TEST_OK(moejit_plan_consuming_workspace_size(plan, c.T, &a.workspace_size));
    }
    a.dout = in.dout.get();
    a.dx = o.dx.get();
    a.d_routing_weights = o.d_weights.get();
    if (layout == MOEJIT_FC1_MERGED) {
        a.dw_gate_up = o.dw_gate_up.get();
    } else {
        a.dw_gate = o.dw_gate.get(), a.dw_up = o.dw_up.get();
    }
    a.dw_down = o.dw_down.get();
    return g_backward_parts ? backward_in_parts(plan, c.T, a) : moejit_plan_backward(plan, &a);
}

// ---------------------------------------------------------------- results

// Device values as float (exact for bf16/fp16/fp32), bitwise comparable.
struct LayerResult {
    std::vector<float> out, dx, d_weights, dw_gate, dw_up, dw_down;
    std::vector<std::uint8_t> saved_after_forward, workspace_after_forward, saved, workspace;
    bool gathered = false;  // the plan's GEMMs gather x's and dout's rows (its PlanLayout)
};

std::vector<float> fetch_values(const DeviceBuffer &b, moejit_dtype_t dtype) {
    if (dtype == MOEJIT_DTYPE_FP32) return b.download<float>();
    const std::vector<std::uint16_t> bits = b.download<std::uint16_t>();
    std::vector<float> v(bits.size());
    parallel_range(v.size(), [&](std::size_t s, std::size_t e) {
        for (std::size_t i = s; i < e; ++i) v[i] = from_half_bits(bits[i], dtype);
    });
    return v;
}

LayerResult fetch(const LayerCase &c, moejit_fc1_layout_t layout, const DeviceOutputs &o) {
    LayerResult r;
    r.out = fetch_values(o.out, c.dtype);
    r.dx = fetch_values(o.dx, c.dtype);
    r.d_weights = fetch_values(o.d_weights, c.routing_dtype);
    if (layout == MOEJIT_FC1_MERGED) {
        const std::vector<float> gu = fetch_values(o.dw_gate_up, c.wgrad_dtype);
        const std::size_t block = std::size_t(c.I) * c.H;
        r.dw_gate.resize(std::size_t(c.E) * block);
        r.dw_up.resize(std::size_t(c.E) * block);
        parallel_tasks(std::size_t(c.E), threads(), [&](std::size_t e) {
            std::copy_n(gu.begin() + 2 * e * block, block, r.dw_gate.begin() + e * block);
            std::copy_n(gu.begin() + (2 * e + 1) * block, block, r.dw_up.begin() + e * block);
        });
    } else {
        r.dw_gate = fetch_values(o.dw_gate, c.wgrad_dtype);
        r.dw_up = fetch_values(o.dw_up, c.wgrad_dtype);
    }
    r.dw_down = fetch_values(o.dw_down, c.wgrad_dtype);
    r.saved = o.saved.download<std::uint8_t>();
    r.workspace = o.workspace.download<std::uint8_t>();
    return r;
}

// Forward, then (keeping the forward's saved and workspace) backward, on the default stream.
LayerResult run_layer(const LayerCase &c, moejit_fc1_layout_t layout, moejit_plan_t plan, DeviceInputs &in,
                      DeviceOutputs &o, const HostLayer &h) {
    prepare(c, layout, h, o);
    MOEJIT_TEST_OK(forward(plan, c, layout, in, o, nullptr));
    std::vector<std::uint8_t> saved_fwd = o.saved.download<std::uint8_t>();  // synchronizes
    std::vector<std::uint8_t> ws_fwd = o.workspace.download<std::uint8_t>();
    MOEJIT_TEST_OK(backward(plan, c, layout, in, o, nullptr));
    synchronize();
    LayerResult r = fetch(c, layout, o);
    r.saved_after_forward = std::move(saved_fwd);
    r.workspace_after_forward = std::move(ws_fwd);
    r.gathered = plan->impl->layout(c.T).gathered;
    return r;
}

// ---------------------------------------------------------------- comparison helpers

struct Check {
    std::string name;
    double value = 0;  // relative error, or a count of mismatches for exact checks
    double limit = 0;
    bool finite = true;     // every device element finite
    bool exact = false;     // value counts mismatching elements
    std::string note;
    bool ok() const { return finite && value <= limit; }  // NaN fails
};

struct Report {
    std::string title;
    std::vector<Check> checks;

    bool ok() const {
        return std::all_of(checks.begin(), checks.end(), [](const Check &c) { return c.ok(); });
    }
    std::string failures() const {
        std::ostringstream s;
        for (const Check &c : checks)
            if (!c.ok())
                s << " [" << c.name << ": " << (c.finite ? "" : "NON-FINITE ") << (c.exact ? "mismatches " : "error ")
                  << c.value << " > " << c.limit << (c.note.empty() ? "" : " " + c.note) << "]";
        return s.str();
    }
    // One line: the relative errors of the outputs; exact checks only when they fail.
    void print() const {
        std::ostringstream s;
        s << "[moe_layer] " << title << " |";
        char buf[64];
        for (const Check &c : checks) {
            if (c.exact && c.ok()) continue;
            if (c.exact) std::snprintf(buf, sizeof buf, " %s %g!", c.name.c_str(), c.value);
            else std::snprintf(buf, sizeof buf, " %s %.1e%s", c.name.c_str(), c.value, c.ok() ? "" : "!");
            s << buf << (c.finite ? "" : "(nan)");
        }
        const auto exact_ok = std::count_if(checks.begin(), checks.end(), [](const Check &c) { return c.exact && c.ok(); });
        if (exact_ok) s << " (" << exact_ok << " bitwise/exact checks equal)";
        s << " | " << (ok() ? "PASS" : "FAIL");
        std::printf("%s\n", s.str().c_str());
        std::fflush(stdout);
    }
    void expect_ok() const { BOOST_TEST(ok(), title << ":" << failures()); }
};

struct Stats {
    double error = 0, worst_segment = 0;
    std::size_t worst_index = 0, nonfinite = 0, want_nonfinite = 0;
};

// ‖got − want‖/‖want‖ over n elements, and the worst of the segments of `segment` elements.
template <class Want> Stats compare(std::span<const float> got, std::size_t n, Want &&want, std::size_t segment = 0) {
    Stats st;
    if (got.size() != n) {
        st.error = st.worst_segment = std::numeric_limits<double>::infinity();
        return st;
    }
    if (n == 0) return st;
    const std::size_t chunk = segment ? segment : std::size_t{1} << 16;
    const std::size_t chunks = (n + chunk - 1) / chunk;
    struct Part {
        double num = 0, den = 0;
        std::size_t nonfinite = 0, want_nonfinite = 0;
    };
    std::vector<Part> parts(chunks);
    parallel_tasks(chunks, threads(), [&](std::size_t c) {
        Part p;
        for (std::size_t i = c * chunk, e = std::min(n, (c + 1) * chunk); i < e; ++i) {
            const double g = got[i], w = want(i);
            if (!std::isfinite(g)) ++p.nonfinite;
            if (!std::isfinite(w)) ++p.want_nonfinite;
            p.num += (g - w) * (g - w);
            p.den += w * w;
        }
        parts[c] = p;
    });
    double num = 0, den = 0;
    for (std::size_t c = 0; c < chunks; ++c) {
        const Part &p = parts[c];
        num += p.num;
        den += p.den;
        st.nonfinite += p.nonfinite;
        st.want_nonfinite += p.want_nonfinite;
        const double seg = p.den > 0 ? std::sqrt(p.num / p.den) : (p.num == 0 ? 0.0 : std::numeric_limits<double>::infinity());
        if (segment && !(seg <= st.worst_segment)) {
            st.worst_segment = seg;
            st.worst_index = c;
        }
    }
    st.error = den > 0 ? std::sqrt(num / den) : (num == 0 ? 0.0 : std::numeric_limits<double>::infinity());
    if (st.nonfinite || st.want_nonfinite) st.error = st.worst_segment = std::numeric_limits<double>::quiet_NaN();
    return st;
}

void check_close(Report &r, const std::string &name, std::span<const float> got, std::span<const float> want, double tol) {
    const Stats st = compare(got, want.size(), [&](std::size_t i) { return double(want[i]); });
    Check c{name, st.error, tol, st.nonfinite == 0, false, ""};
    if (st.nonfinite) c.note = std::to_string(st.nonfinite) + " non-finite of " + std::to_string(want.size());
    if (st.want_nonfinite) c.note += " (reference non-finite: the case's scales overflow the dtype)";
    if (got.size() != want.size()) c.note = "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    r.checks.push_back(c);
}

// Bitwise equality of float images (a NaN equals the same NaN: poison left on both sides shows
// as non-finite in the value checks, not here).
std::size_t mismatches(std::span<const float> a, std::span<const float> b) {
    if (a.size() != b.size()) return std::max(a.size(), b.size()) + 1;
    std::vector<std::size_t> parts((a.size() + 65535) / 65536);
    parallel_tasks(parts.size(), threads(), [&](std::size_t c) {
        std::size_t m = 0;
        for (std::size_t i = c * 65536, e = std::min(a.size(), (c + 1) * 65536); i < e; ++i)
            m += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
        parts[c] = m;
    });
    return std::accumulate(parts.begin(), parts.end(), std::size_t{0});
}

void check_exact(Report &r, const std::string &name, std::span<const float> got, std::span<const float> want) {
    Check c{name, double(mismatches(got, want)), 0.0, true, true, ""};
    c.finite = std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); });
    r.checks.push_back(c);
}

void check_bytes(Report &r, const std::string &name, const std::vector<std::uint8_t> &a, const std::vector<std::uint8_t> &b) {
    std::size_t m = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
    if (a.size() == b.size())
        for (std::size_t i = 0; i < a.size(); ++i) m += a[i] != b[i];
    r.checks.push_back({name, double(m), 0.0, true, true, "bytes"});
}

// The expected weight gradient: the float64 sum, in the gradient dtype, or added to the prefill.
void check_wgrad(Report &r, const LayerCase &c, const std::string &name, std::span<const float> got,
                 const std::vector<float> &ref, const std::vector<float> &prefill, const std::vector<std::int32_t> &counts) {
    const std::size_t segment = std::size_t(c.I) * c.H;
    const Storage st = storage_of(c.wgrad_dtype);
    const Stats s = c.accumulate
                        ? compare(got, ref.size(), [&](std::size_t i) { return double(float(double(prefill[i]) + ref[i])); }, segment)
                        : compare(got, ref.size(), [&](std::size_t i) { return double(store_as(ref[i], st)); }, segment);
    Check whole{name, s.error, c.tol(), s.nonfinite == 0, false, ""};
    if (s.nonfinite) whole.note = std::to_string(s.nonfinite) + " non-finite";
    r.checks.push_back(whole);
    Check expert{name + "/expert", s.worst_segment, c.expert_tol(), s.nonfinite == 0, false,
                 "worst expert " + std::to_string(s.worst_index)};
    r.checks.push_back(expert);
    // Experts without rows: exactly 0, or exactly the prefill when accumulating.
    std::size_t bad = 0;
    for (std::size_t e = 0; e < counts.size() && got.size() == ref.size(); ++e) {
        if (counts[e] != 0) continue;
        for (std::size_t i = e * segment; i < (e + 1) * segment; ++i) {
            const float want = c.accumulate ? prefill[i] : 0.0f;
            bad += std::memcmp(&got[i], &want, sizeof(float)) != 0;
        }
    }
    r.checks.push_back({name + "/empty_experts", double(bad), 0.0, true, true, ""});
}

// Regions of the saved and workspace buffers (moejit::PlanLayout) as values; gathered as the
// plan decided it (its tiles, chosen at creation).
struct Regions {
    const LayerCase &c;
    moejit::PlanLayout L;
    Regions(const LayerCase &cs, moejit_fc1_layout_t layout, bool gathered)
        : c(cs), L(moejit::to_internal(desc_of(cs, layout)), cs.T, gathered) {}

    std::vector<float> halves(const std::vector<std::uint8_t> &buf, const moejit::Region &reg, std::size_t first,
                              std::size_t n) const {
        std::vector<float> v(n);
        const std::size_t begin = reg.offset + 2 * first;
        if (begin + 2 * n > buf.size() || 2 * (first + n) > reg.bytes) throw std::logic_error("region out of range");
        for (std::size_t i = 0; i < n; ++i) {
            std::uint16_t b;
            std::memcpy(&b, &buf[begin + 2 * i], 2);
            v[i] = from_half_bits(b, c.dtype);
        }
        return v;
    }
    template <class V> std::vector<float> words(const std::vector<std::uint8_t> &buf, const moejit::Region &reg,
                                                std::size_t n) const {
        if (reg.offset + 4 * n > buf.size() || 4 * n > reg.bytes) throw std::logic_error("region out of range");
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) {
            V w;
            std::memcpy(&w, &buf[reg.offset + 4 * i], 4);
            v[i] = static_cast<float>(w);
        }
        return v;
    }
    // A split-layout pair (g, u) from a region holding [S,I] + [S,I] (split) or [S,2I] (merged).
    void pair(const std::vector<std::uint8_t> &buf, const moejit::Region &reg, moejit_fc1_layout_t layout,
              std::vector<float> &first, std::vector<float> &second) const {
        const std::size_t S = c.S(), I = c.I;
        if (layout == MOEJIT_FC1_SPLIT) {
            first = halves(buf, reg, 0, S * I);
            second = halves(buf, reg, S * I, S * I);
        } else {
            const std::vector<float> all = halves(buf, reg, 0, 2 * S * I);
            first.resize(S * I);
            second.resize(S * I);
            for (std::size_t s = 0; s < S; ++s) {
                std::copy_n(all.begin() + 2 * s * I, I, first.begin() + s * I);
                std::copy_n(all.begin() + (2 * s + 1) * I, I, second.begin() + s * I);
            }
        }
    }
};

// What the plan keeps between and inside its calls, stage by stage.
void check_intermediates(Report &r, const LayerCase &c, moejit_fc1_layout_t layout, const HostLayer &,
                         const MoeRefResult &ref, const LayerResult &res) {
    const Regions R(c, layout, res.gathered);
    const double tol = c.tol();
    const std::size_t S = c.S(), H = c.H, I = c.I;
    const std::vector<float> offsets_ref(ref.offsets.begin(), ref.offsets.end());
    check_exact(r, "offsets", R.words<std::int32_t>(res.saved_after_forward, R.L.offsets, c.E + 1), offsets_ref);
    if (S == 0) return;
    const std::vector<float> index_ref(ref.scatter_index.begin(), ref.scatter_index.end());
    check_exact(r, "scatter_index", R.words<std::int32_t>(res.saved_after_forward, R.L.scatter_index, S), index_ref);
    // The routing weights in scattered order: saved, or (desc->routing_weights_in_backward, 0.14)
    // the forward's workspace, scattered again by the backward into its own region.
    if (R.L.w_s_saved) {
        check_exact(r, "w_s", R.words<float>(res.saved_after_forward, R.L.w_s, S), ref.w_s);
    } else {
        check_exact(r, "w_s", R.words<float>(res.workspace_after_forward, R.L.w_s, S), ref.w_s);
        check_exact(r, "w_s_backward", R.words<float>(res.workspace, R.L.w_s_backward, S), ref.w_s);
    }
    if (R.L.gathered) {
        // The token of each scattered row, by which fc1 reads x's rows (no forward scatter; in
        // the forward's workspace since 0.13).
        std::vector<float> token_ref(S);
        for (std::size_t s = 0; s < S; ++s) token_ref[s] = static_cast<float>(ref.route_of_row[s] / c.k);
        check_exact(r, "row_token", R.words<std::int32_t>(res.workspace_after_forward, R.L.row_token, S), token_ref);
    }
    // x's scatter (not gathered) is checked through g and u, fc1's outputs: fc2 writes y over it
    // (0.13), checked below from the same region.
    std::vector<float> g, u;
    R.pair(res.saved_after_forward, R.L.gate_up, layout, g, u);
    check_close(r, "g", g, ref.g, tol);
    check_close(r, "u", u, ref.u, tol);
    const std::vector<float> aw_forward = R.halves(res.workspace_after_forward, R.L.aw, 0, S * I);
    check_close(r, "aw", aw_forward, ref.aw, tol);
    check_close(r, "y", R.halves(res.workspace_after_forward, R.L.y, 0, S * H), ref.y, tol);
    // backward scratch. dy's rows, then x's, then dxs share one region (DESIGN.md §2.7), so
    // only dxs is left to read; dy and x's rows are checked through what they feed: d(a·w)
    // and dw_down (dy), dw_gate / dw_up (x's rows). d(a·w)'s region ends holding a·w, recomputed
    // by the SwiGLU backward for fc2's weight gradient: bitwise the forward's (which is not
    // saved); d(a·w) itself is checked through dg, du and d_w_s.
    check_exact(r, "aw_recomputed", R.halves(res.workspace, R.L.daw, 0, S * I), aw_forward);
    R.pair(res.workspace, R.L.d_gate_up, layout, g, u);
    check_close(r, "dg", g, ref.dg, tol);
    check_close(r, "du", u, ref.du, tol);
    check_close(r, "d_w_s", R.words<float>(res.workspace, R.L.d_w_s, S), ref.d_w_s, tol);
    check_close(r, "dxs", R.halves(res.workspace, R.L.dxs, 0, S * H),
                layout == MOEJIT_FC1_MERGED ? ref.dxs_merged : ref.dxs_split, tol);
    // Backward only reads what forward saved.
    check_bytes(r, "saved_unchanged", res.saved_after_forward, res.saved);
}

std::string shape_of(const LayerCase &c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "T=%lld E=%d H=%lld I=%lld k=%d %s", static_cast<long long>(c.T), c.E,
                  static_cast<long long>(c.H), static_cast<long long>(c.I), c.k,
                  c.dtype == MOEJIT_DTYPE_FP16 ? "fp16" : "bf16");
    return buf;
}

// Every output and gradient of one run against the reference (any backward: whole, consuming,
// in parts).
Report check_outputs(const LayerCase &c, moejit_fc1_layout_t layout, const HostLayer &h, const MoeRefResult &ref,
                     const LayerResult &res) {
    Report r;
    r.title = c.name + " " + layout_name(layout) + " " + shape_of(c);
    const double tol = c.tol();
    check_close(r, "out", res.out, ref.out, tol);
    check_close(r, "dx", res.dx, layout == MOEJIT_FC1_MERGED ? ref.dx_merged : ref.dx_split, tol);
    check_close(r, "d_rw", res.d_weights, ref.d_routing_weights, tol);
    check_wgrad(r, c, "dW_gate", res.dw_gate, ref.dw_gate, h.prefill_gate, ref.counts);
    check_wgrad(r, c, "dW_up", res.dw_up, ref.dw_up, h.prefill_up, ref.counts);
    check_wgrad(r, c, "dW_down", res.dw_down, ref.dw_down, h.prefill_down, ref.counts);
    return r;
}

// Every output, gradient and intermediate of one run (a keeping backward) against the
// reference. The hook test uses exactly this.
Report check_layer(const LayerCase &c, moejit_fc1_layout_t layout, const HostLayer &h, const MoeRefResult &ref,
                   const LayerResult &res) {
    Report r = check_outputs(c, layout, h, ref, res);
    check_intermediates(r, c, layout, h, ref, res);
    return r;
}

// Split and merged fc1 on the same inputs.
Report check_split_vs_merged(const LayerCase &c, const LayerResult &split, const LayerResult &merged) {
    Report r;
    r.title = c.name + " split-vs-merged " + shape_of(c);
    // The same fp32 reductions in the same order: bitwise.
    check_exact(r, "out", merged.out, split.out);
    check_exact(r, "d_rw", merged.d_weights, split.d_weights);
    check_exact(r, "dW_gate", merged.dw_gate, split.dw_gate);
    check_exact(r, "dW_up", merged.dw_up, split.dw_up);
    check_exact(r, "dW_down", merged.dw_down, split.dw_down);
    // dx: merged sums over 2I in fp32 once, split rounds dg·W_gate to the layer dtype first.
    check_close(r, "dx", merged.dx, split.dx, kLayoutDxFactor * c.tol());
    return r;
}

// Every output and gradient of two runs, bit for bit.
void compare_outputs_bitwise(Report &r, const LayerResult &a, const LayerResult &b) {
    check_exact(r, "out", a.out, b.out);
    check_exact(r, "dx", a.dx, b.dx);
    check_exact(r, "d_rw", a.d_weights, b.d_weights);
    check_exact(r, "dW_gate", a.dw_gate, b.dw_gate);
    check_exact(r, "dW_up", a.dw_up, b.dw_up);
    check_exact(r, "dW_down", a.dw_down, b.dw_down);
}

void compare_bitwise(Report &r, const LayerResult &a, const LayerResult &b) {
    compare_outputs_bitwise(r, a, b);
    check_bytes(r, "saved", a.saved, b.saved);
    check_bytes(r, "workspace", a.workspace, b.workspace);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Per fc1 layout (split, then merged): a plan of `c` and buffers sized by its queries, handed to
// body(layout, plan, outputs).
template <class Body> void for_each_layout(const LayerCase &c, Body body) {
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED}) {
        PlanHandle plan;
        create_plan(plan, c, layout);
        DeviceOutputs o = allocate_outputs(c, layout, plan.plan);
        body(layout, plan.plan, o);
    }
}

// for_each_layout on one draw of c's inputs: body(layout, plan, outputs, host, reference,
// device inputs).
template <class Body> void for_each_layout_on_inputs(const LayerCase &c, Body body) {
    gpu_context();
    const HostLayer h = make_host_layer(c, test_seed());
    const MoeRefResult ref = reference_of(c, h);
    DeviceInputs in;
    in.upload(c, h);
    for_each_layout(c, [&](moejit_fc1_layout_t layout, moejit_plan_t plan, DeviceOutputs &o) {
        body(layout, plan, o, h, ref, in);
    });
}

// Runs one case: reference, split and merged plans, every check; prints a line per layout.
void run_case(const LayerCase &c) {
    gpu_context();  // makes the device current for the buffers
    const auto t0 = std::chrono::steady_clock::now();
    const HostLayer h = make_host_layer(c, test_seed());
    const MoeRefResult ref = reference_of(c, h);
    const double ref_seconds = seconds_since(t0);
    if (c.limit > 0)
        std::printf("[moe_layer] %s: limit %g clamps %.0f%% of g and %.0f%% of u\n", c.name.c_str(), c.limit,
                    100 * ref.gate_clamped, 100 * ref.up_clamped);
    DeviceInputs in;
    in.upload(c, h);
    LayerResult results[2];
    for_each_layout(c, [&](moejit_fc1_layout_t layout, moejit_plan_t plan, DeviceOutputs &o) {
        LayerResult &res = results[layout == MOEJIT_FC1_MERGED];
        res = run_layer(c, layout, plan, in, o, h);
        const Report r = check_layer(c, layout, h, ref, res);
        r.print();
        r.expect_ok();
    });
    const Report sm = check_split_vs_merged(c, results[0], results[1]);
    sm.print();
    sm.expect_ok();
    std::printf("[moe_layer] %s: %.1f s (data + reference %.1f s)\n", c.name.c_str(), seconds_since(t0), ref_seconds);
}

// ---------------------------------------------------------------- the cases

// A backward that spends saved against the keeping one on the same inputs, itself checked
// against the float64 reference with every intermediate: the same bits in every output and
// gradient, d_gate_up written over the saved g and u (bitwise the keeping call's workspace
// region), the rest of saved as the forward left it. Spending: the consuming whole backward
// (consume_saved = 1, both calls on exactly moejit_plan_consuming_workspace_size bytes), or the
// backward in two parts (moejit_plan_backward_part, DOWN then UP, each on exactly its own
// workspace size; UP's weight gradients split their reductions in dx: these cases have no
// expert past the split's rows, so the same order).
enum class Spending { consuming, parts };

void run_spending_case(const LayerCase &c, Spending how) {
    for_each_layout_on_inputs(c, [&](moejit_fc1_layout_t layout, moejit_plan_t plan, DeviceOutputs &o,
                                     const HostLayer &h, const MoeRefResult &ref, DeviceInputs &in) {
        const LayerResult keep = run_layer(c, layout, plan, in, o, h);
        const Report checked = check_layer(c, layout, h, ref, keep);
        checked.print();
        checked.expect_ok();
        bool &mode = how == Spending::consuming ? g_consume_saved : g_backward_parts;
        if (how == Spending::consuming) {
            std::size_t consuming = 0;
            MOEJIT_TEST_OK(moejit_plan_consuming_workspace_size(plan, c.T, &consuming));
            o.workspace = DeviceBuffer(consuming);
        }
        mode = true;
        const LayerResult spend = run_layer(c, layout, plan, in, o, h);
        mode = false;
        Report r;
        r.title = c.name + (how == Spending::consuming ? " consuming" : " parts") + "-vs-keeping " +
                  layout_name(layout) + " " + shape_of(c);
        compare_outputs_bitwise(r, spend, keep);
        check_bytes(r, "saved_after_forward", spend.saved_after_forward, keep.saved_after_forward);
        const Regions R(c, layout, keep.gathered);
        const auto bytes_of = [](const std::vector<std::uint8_t> &buf, const moejit::Region &reg) {
            return std::vector<std::uint8_t>(buf.begin() + reg.offset, buf.begin() + reg.offset + reg.bytes);
        };
        check_bytes(r, "d_gate_up_over_saved", bytes_of(spend.saved, R.L.gate_up),
                    bytes_of(keep.workspace, R.L.d_gate_up));
        const std::vector<std::uint8_t> head_after(spend.saved.begin(), spend.saved.begin() + R.L.gate_up.offset),
            head_forward(spend.saved_after_forward.begin(), spend.saved_after_forward.begin() + R.L.gate_up.offset);
        check_bytes(r, "saved_before_gate_up_unchanged", head_after, head_forward);
        r.print();
        r.expect_ok();
    });
}

// A case of shape (T, E, H, I, k); everything else at LayerCase's defaults.
LayerCase layer_case(std::string name, std::int64_t T, std::int32_t E, std::int64_t H, std::int64_t I,
                     std::int32_t k) {
    LayerCase c;
    c.name = std::move(name);
    c.T = T, c.H = H, c.I = I;
    c.E = E, c.k = k;
    return c;
}

// The seed of the library: T=128, k=2, E=4, every route to expert 0 (256 rows for one expert),
// BLOCK_M = 128 forced: a bound from T would compute 128 of them.
LayerCase seed_case(std::int64_t T) {
    LayerCase c = layer_case("seed_T" + std::to_string(T), T, 4, 128, 64, 2);
    c.routing = Routing::all_to_expert0;
    c.tile = "128x128x32";
    return c;
}

// A mid-size layer for the feature matrix: shared kernels across cases keep the JIT time low.
LayerCase mid_case(const std::string &name) {
    return layer_case(name, 256, 16, 512, 256, 4);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(seed)

BOOST_AUTO_TEST_CASE(all_routes_to_expert0_T128_bm128) {
    LayerCase c = seed_case(128);
    c.wgrad_dtype = MOEJIT_DTYPE_BF16;
    c.routing_dtype = MOEJIT_DTYPE_BF16;
    run_case(c);
}

BOOST_AUTO_TEST_CASE(all_routes_to_expert0_T256_bm128) {
    LayerCase c = seed_case(256);
    c.index_dtype = MOEJIT_DTYPE_INT32;
    run_case(c);
}

// Qwen3-30B-A3B's layer with every route to expert 0: one expert owns all S = 2048 rows.
BOOST_AUTO_TEST_CASE(all_routes_to_expert0_realistic) {
    LayerCase c = layer_case("seed_realistic", 256, 128, 2048, 768, 8);
    c.routing = Routing::all_to_expert0;
    c.tokens_hint = c.T;
    run_case(c);
}

// Every route to expert 0 with S = 5120 rows: on sm_90a the weight gradients' reduction over
// the expert's rows is split (gemm/tile_schedule.hpp: segments of 4096 rows, fp32
// partials in the plan's workspace, summed in order) — results must match as any other case.
BOOST_AUTO_TEST_CASE(all_routes_to_expert0_split_weight_gradients) {
    LayerCase c = layer_case("seed_split_wgrad", 1280, 8, 256, 128, 4);
    c.routing = Routing::all_to_expert0;
    c.wgrad_dtype = MOEJIT_DTYPE_BF16;
    run_case(c);
    c.name = "seed_split_wgrad_accumulate";
    c.wgrad_dtype = MOEJIT_DTYPE_FP32;
    c.accumulate = true;
    run_case(c);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(softmax_topk)

BOOST_AUTO_TEST_CASE(qwen3_30b_a3b) {
    LayerCase c = layer_case("qwen3_30b_a3b", 512, 128, 2048, 768, 8);
    c.tokens_hint = c.T;
    run_case(c);
}

// DeepSeek-V2-Lite's layer, routed to 56 of the 64 experts (the first and last included among
// the 8 empty ones), bf16 weight and routing gradients, int32 ids.
BOOST_AUTO_TEST_CASE(deepseek_v2_lite_empty_experts) {
    LayerCase c = layer_case("deepseek_v2_lite", 256, 64, 2048, 1408, 6);
    c.tokens_hint = c.T;
    c.index_dtype = MOEJIT_DTYPE_INT32;
    c.routing_dtype = MOEJIT_DTYPE_BF16;
    c.wgrad_dtype = MOEJIT_DTYPE_BF16;
    for (std::int32_t e = 0; e < c.E; ++e)
        if (e != 0 && e != 7 && e != 20 && e != 33 && e != 34 && e != 50 && e != 62 && e != 63) c.active.push_back(e);
    run_case(c);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(features)

// g, u ~ N(0, L): ~16% of g above L, ~32% of u outside [-L, L].
BOOST_AUTO_TEST_CASE(swiglu_limit_7) {
    LayerCase c = mid_case("limit7");
    c.T = 250;
    c.limit = 7.0f;
    c.fc1_scale = 7.0;
    run_case(c);
}

BOOST_AUTO_TEST_CASE(swiglu_limit_10_duplicate_routes) {
    LayerCase c = mid_case("limit10_duplicates");
    c.limit = 10.0f;
    c.fc1_scale = 10.0;
    c.routing = Routing::uniform;
    c.index_dtype = MOEJIT_DTYPE_INT32;
    c.routing_dtype = MOEJIT_DTYPE_BF16;
    c.wgrad_dtype = MOEJIT_DTYPE_BF16;
    run_case(c);
}

// I = 200 is not a multiple of 64: split fc1's dgrad is then a GEMM and an accumulating one
// (C += du·W_up) instead of one GEMM over both operand pairs.
BOOST_AUTO_TEST_CASE(intermediate_not_a_multiple_of_64) {
    LayerCase c = mid_case("ragged_intermediate");
    c.I = 200;
    run_case(c);
}

// fc1 with the SwiGLU epilogue (opt-in, options->fuse_swiglu): a limit with duplicate routes,
// and I = 200 (the epilogue's ragged last column chunk).
BOOST_AUTO_TEST_CASE(fused_swiglu_epilogue) {
    LayerCase c = mid_case("fused_limit10_duplicates");
    c.fuse_swiglu = true;
    c.limit = 10.0f;
    c.fc1_scale = 10.0;
    c.routing = Routing::uniform;
    run_case(c);
    c = mid_case("fused_ragged_intermediate");
    c.fuse_swiglu = true;
    c.I = 200;
    run_case(c);
}

// Experts 0, 15 and most others get no rows; weight gradients accumulate into a random prefill.
BOOST_AUTO_TEST_CASE(empty_experts_accumulate) {
    LayerCase c = mid_case("empty_experts_accumulate");
    c.active = {1, 2, 5, 8, 9, 13};
    c.accumulate = true;
    run_case(c);
}

BOOST_AUTO_TEST_CASE(single_token) {
    LayerCase c = mid_case("T1");
    c.T = 1;
    c.routing = Routing::uniform;
    c.active = {3, 11};  // 4 routes over 2 experts: duplicates
    run_case(c);
}

// The cases a backward that spends saved runs against the keeping one (run_spending_case):
// duplicate routes with a limit, every route to expert 0, T = 1, empty experts accumulating,
// T = 0 (weight gradients still written). Names start with `prefix`.
void run_spending_cases(Spending how, const std::string &prefix) {
    LayerCase c = mid_case(prefix + "_duplicates");
    c.routing = Routing::uniform;
    c.limit = 10.0f;
    c.fc1_scale = 10.0;
    run_spending_case(c, how);
    run_spending_case(seed_case(128), how);
    c = mid_case(prefix + "_T1");
    c.T = 1;
    c.routing = Routing::uniform;
    c.active = {3, 11};
    run_spending_case(c, how);
    c = mid_case(prefix + "_empty_experts_accumulate");
    c.active = {1, 2, 5, 8, 9, 13};
    c.accumulate = true;
    run_spending_case(c, how);
    c = mid_case(prefix + "_T0");
    c.T = 0;
    run_spending_case(c, how);
}

// moejit_plan_backward_part (since 0.13), on run_spending_cases; the next case: one expert that
// owns more rows than UP's split scratch in dx holds unsplit (checked against the reference
// only: UP may split it in longer segments than the whole backward).
BOOST_AUTO_TEST_CASE(backward_parts_match_the_whole_backward) { run_spending_cases(Spending::parts, "parts"); }

BOOST_AUTO_TEST_CASE(backward_parts_split_in_dx) {
    // 4096 tokens, k = 4, every route to expert 0: 16384 rows of one expert, past the split's
    // 4096-row minimum; dx holds T·H = 4096·512 bf16 elements = 4 MiB, fewer than the whole
    // backward's split scratch for fc1 (M = 2I or I, N = 512).
    LayerCase c = layer_case("parts_split_in_dx", 4096, 16, 512, 256, 4);
    c.routing = Routing::all_to_expert0;
    for_each_layout_on_inputs(c, [&](moejit_fc1_layout_t layout, moejit_plan_t plan, DeviceOutputs &o,
                                     const HostLayer &h, const MoeRefResult &ref, DeviceInputs &in) {
        g_backward_parts = true;
        const LayerResult parts = run_layer(c, layout, plan, in, o, h);
        g_backward_parts = false;
        const Report checked = check_outputs(c, layout, h, ref, parts);
        checked.print();
        checked.expect_ok();
    });
}

// desc->routing_weights_in_backward (since 0.14; the PyTorch binding's plans): saved keeps no
// w_s, the backward scatters it again from args->routing_weights. The whole layer against the
// reference, w_s in both workspaces (check_intermediates), on duplicate routes with a limit,
// every route to expert 0, T = 1 and T = 0; then the parts against the whole backward.
BOOST_AUTO_TEST_CASE(routing_weights_in_backward) {
    LayerCase c = mid_case("rw_in_backward_duplicates");
    c.routing = Routing::uniform;
    c.limit = 10.0f;
    c.rw_in_backward = true;
    run_case(c);
    LayerCase e = seed_case(128);
    e.rw_in_backward = true;
    run_case(e);
    c = mid_case("rw_in_backward_T1");
    c.T = 1;
    c.routing = Routing::uniform;
    c.active = {3, 11};
    c.rw_in_backward = true;
    run_case(c);
    c.name = "rw_in_backward_T0";
    c.T = 0;
    run_case(c);
    c = mid_case("rw_in_backward_parts");
    c.routing = Routing::uniform;
    c.rw_in_backward = true;
    run_spending_case(c, Spending::parts);
}

// moejit_backward_args_t.consume_saved (since 0.12), on run_spending_cases.
BOOST_AUTO_TEST_CASE(consuming_backward_matches_the_keeping_one) { run_spending_cases(Spending::consuming, "consume"); }

BOOST_AUTO_TEST_CASE(zero_tokens) {
    LayerCase c = mid_case("T0");
    c.T = 0;
    run_case(c);  // weight gradients must be written as exactly 0
    c.name = "T0_accumulate";
    c.accumulate = true;
    run_case(c);  // and left exactly as they were
}

BOOST_AUTO_TEST_CASE(fp16) {
    LayerCase c = mid_case("fp16");
    c.T = 200;
    c.dtype = MOEJIT_DTYPE_FP16;
    c.routing_dtype = MOEJIT_DTYPE_FP16;
    c.wgrad_dtype = MOEJIT_DTYPE_FP16;
    run_case(c);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(reproducibility)

BOOST_AUTO_TEST_CASE(bitwise_deterministic_across_runs) {
    gpu_context();
    LayerCase c = mid_case("determinism");
    c.limit = 7.0f;
    c.fc1_scale = 7.0;
    const HostLayer h = make_host_layer(c, test_seed());
    DeviceInputs in;
    in.upload(c, h);
    for_each_layout(c, [&](moejit_fc1_layout_t layout, moejit_plan_t plan, DeviceOutputs &o) {
        const LayerResult first = run_layer(c, layout, plan, in, o, h);
        const LayerResult second = run_layer(c, layout, plan, in, o, h);
        Report r;
        r.title = c.name + " " + layout_name(layout) + " run1-vs-run2";
        compare_bitwise(r, first, second);
        r.print();
        r.expect_ok();
    });
}

// Forward + backward captured once on a created stream, then replayed after new inputs (other
// values, other routing) were written into the same buffers: bitwise the eager result.
BOOST_AUTO_TEST_CASE(cuda_graph_replay_matches_eager) {
    gpu_context();
    LayerCase c = mid_case("cuda_graph");
    c.limit = 7.0f;
    c.fc1_scale = 7.0;
    const HostLayer first = make_host_layer(c, test_seed());
    const HostLayer second = make_host_layer(c, test_seed() + 1);
    const MoeRefResult ref = reference_of(c, second);
    CUstream stream = nullptr;
    MOEJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED}) {
        DeviceInputs in;
        in.upload(c, first);
        PlanHandle plan;
        create_plan(plan, c, layout);
        DeviceOutputs o = allocate_outputs(c, layout, plan.plan);
        // Eager once first (as frameworks warm up before capturing).
        prepare(c, layout, first, o);
        MOEJIT_TEST_OK(forward(plan.plan, c, layout, in, o, stream));
        MOEJIT_TEST_OK(backward(plan.plan, c, layout, in, o, stream));
        MOEJIT_CU(cuStreamSynchronize(stream));

        CUgraph graph = nullptr;
        CUgraphExec exec = nullptr;
        MOEJIT_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        moejit_status_t status = forward(plan.plan, c, layout, in, o, stream);
        if (status == MOEJIT_SUCCESS) status = backward(plan.plan, c, layout, in, o, stream);
        const std::string error = moejit_last_error();
        const CUresult ended = moejit::driver().cuStreamEndCapture(stream, &graph);  // always end it
        BOOST_REQUIRE_MESSAGE(status == MOEJIT_SUCCESS, "captured call failed: " << error);
        moejit::check_cuda(ended, "cuStreamEndCapture");
        MOEJIT_CU(cuGraphInstantiate(&exec, graph, 0));

        in.upload(c, second);  // same buffers, new contents
        prepare(c, layout, second, o);
        MOEJIT_CU(cuGraphLaunch(exec, stream));
        MOEJIT_CU(cuStreamSynchronize(stream));
        LayerResult replayed = fetch(c, layout, o);

        prepare(c, layout, second, o);
        MOEJIT_TEST_OK(forward(plan.plan, c, layout, in, o, stream));
        std::vector<std::uint8_t> saved_fwd = o.saved.download<std::uint8_t>();
        std::vector<std::uint8_t> ws_fwd = o.workspace.download<std::uint8_t>();
        MOEJIT_TEST_OK(backward(plan.plan, c, layout, in, o, stream));
        MOEJIT_CU(cuStreamSynchronize(stream));
        LayerResult eager = fetch(c, layout, o);
        eager.saved_after_forward = std::move(saved_fwd);
        eager.workspace_after_forward = std::move(ws_fwd);
        eager.gathered = plan.plan->impl->layout(c.T).gathered;

        Report r;
        r.title = c.name + " " + layout_name(layout) + " graph-vs-eager";
        compare_bitwise(r, replayed, eager);
        r.print();
        r.expect_ok();
        const Report against_ref = check_layer(c, layout, second, ref, eager);
        against_ref.print();
        against_ref.expect_ok();
        MOEJIT_CU(cuGraphExecDestroy(exec));
        MOEJIT_CU(cuGraphDestroy(graph));
    }
    MOEJIT_CU(cuStreamDestroy(stream));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(catches_the_bug)

// The suite must be able to fail: with the backward GEMMs' per-expert row bound taken from T
// (the historical bug: a StaleBoundPlan, through the same C calls) on the seed case, the very
// checks above must report failure (non-finite or wrong gradients); the plain plan passes them.
BOOST_AUTO_TEST_CASE(stale_bound_from_tokens_is_detected) {
    gpu_context();
    const LayerCase c = seed_case(128);
    const HostLayer h = make_host_layer(c, test_seed());
    const MoeRefResult ref = reference_of(c, h);
    DeviceInputs in;
    in.upload(c, h);
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED}) {
        PlanHandle plan, stale;
        create_plan(plan, c, layout);
        create_plan(stale, c, layout, true);
        DeviceOutputs o = allocate_outputs(c, layout, plan.plan);
        const Report good = check_layer(c, layout, h, ref, run_layer(c, layout, plan.plan, in, o, h));
        Report bad = check_layer(c, layout, h, ref, run_layer(c, layout, stale.plan, in, o, h));
        bad.title += " WITH the backward bound from T (StaleBoundPlan)";
        bad.print();
        BOOST_TEST(good.ok(), good.title << ":" << good.failures());
        BOOST_TEST(!bad.ok(), bad.title << ": the comparison did not catch the stale bound (does StaleBoundPlan override backward_gemm_bound?)");
        if (!bad.ok()) std::printf("[moe_layer]   caught:%s\n", bad.failures().c_str());
    }
}

BOOST_AUTO_TEST_SUITE_END()

// Deployment path (moejit-warmup then MOEJIT_COMPILE=off): a compile-only context warms the
// plan's kernels into a fresh folder for this device's arch; a device context with compilation
// switched off through the environment then creates the plan from disk alone (counters prove
// nothing compiled) and runs a full, correct forward and backward.
BOOST_AUTO_TEST_SUITE(warmup)

BOOST_AUTO_TEST_CASE(warmed_cache_runs_a_layer_with_compile_off) {
    const LayerCase c = mid_case("warmed_compile_off");
    const char *arch = nullptr;
    MOEJIT_TEST_OK(moejit_context_arch(gpu_context(), &arch));
    const std::string device_arch = arch;
    moejit::test::TempDir dir("moejit-warm");
    const std::string cache = dir.string();
    const moejit_plan_desc_t desc = desc_of(c, MOEJIT_FC1_SPLIT);

    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = device_arch.c_str();
    o.cache_dir = cache.c_str();
    moejit_context_t warm = nullptr;
    MOEJIT_TEST_OK(moejit_context_create(&o, &warm));
    int kernels = 0;
    const moejit_status_t warmed = moejit_plan_warmup(warm, &desc, &kernels);
    moejit_context_destroy(warm);
    MOEJIT_TEST_OK(warmed);
    BOOST_TEST(kernels > 0);

    ::setenv("MOEJIT_COMPILE", "off", 1);
    o.compile_only = 0;
    o.arch = nullptr;  // the device's own, which is what was warmed
    moejit_context_t strict = nullptr;
    const moejit_status_t created = moejit_context_create(&o, &strict);
    ::unsetenv("MOEJIT_COMPILE");
    MOEJIT_TEST_OK(created);
    struct ContextGuard {
        moejit_context_t c;
        ~ContextGuard() { moejit_context_destroy(c); }
    } guard{strict};
    {
        PlanHandle plan;
        MOEJIT_TEST_OK(moejit_plan_create(strict, &desc, &plan.plan));
        moejit_cache_stats_t stats;
        moejit_cache_stats_init(&stats);
        MOEJIT_TEST_OK(moejit_context_cache_stats(strict, &stats));
        std::printf("[moe_layer] %s: warmup %d kernels; plan with MOEJIT_COMPILE=off: compiles=%llu disk_hits=%llu misses=%llu\n",
                    c.name.c_str(), kernels, (unsigned long long)stats.compiles,
                    (unsigned long long)stats.disk_hits, (unsigned long long)stats.misses);
        BOOST_TEST(stats.compiles == 0u);
        BOOST_TEST(stats.misses == 0u);
        BOOST_TEST(stats.disk_hits == static_cast<std::uint64_t>(kernels));

        const HostLayer h = make_host_layer(c, test_seed());
        const MoeRefResult ref = reference_of(c, h);
        DeviceInputs in;
        in.upload(c, h);
        DeviceOutputs out = allocate_outputs(c, MOEJIT_FC1_SPLIT, plan.plan);
        const Report r = check_layer(c, MOEJIT_FC1_SPLIT, h, ref, run_layer(c, MOEJIT_FC1_SPLIT, plan.plan, in, out, h));
        r.print();
        r.expect_ok();
        MOEJIT_TEST_OK(moejit_context_cache_stats(strict, &stats));
        BOOST_TEST(stats.compiles == 0u);
    }
}

BOOST_AUTO_TEST_SUITE_END()
