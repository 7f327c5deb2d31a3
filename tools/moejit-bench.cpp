// moejit-bench: times the whole MoE layer (forward, forward+backward) on the reference shapes of
// python -m moejit_bench, for users without PyTorch. Uses only the public C ABI (moejit.h);
// device memory, streams and events come from the CUDA driver, dlopened like moejit itself does
// (capi/examples/cuda_driver.h, the example's loader), so it builds without the toolkit and
// runs without a GPU.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cuda_driver.h"
#include "layer_args.h"
#include "moejit.h"
#include "reference_shapes.hpp"
#include "moejit/moejit.hpp"  // the installed RAII wrappers: moejit::api::Context, Plan

namespace {

using moejit::reference::kShapes;  // docs/DESIGN.md §6, as in bench/moejit_bench/layer.py
using moejit::reference::Shape;
constexpr const char *kPeers = "peers: none without PyTorch; use python -m moejit_bench for "
                               "torch._grouped_mm and the eager loop";

const char *kHelp = R"(usage: moejit-bench [--shapes a,b,...] [--routing topk|expert0] [--layout split|merged]
                    [--warmup N] [--reps N] [--tokens T] [--json PATH] [--help]

Times the moejit MoE layer (bf16, SwiGLU, int32 expert ids, fp32 routing weights) forward and
forward+backward through the C ABI: median of --reps runs between CUDA events after --warmup
runs. FLOPs: forward 6*S*H*I, backward 12*S*H*I, S = T*k. The dense ceiling is moejit's own
grouped GEMM on one expert (8192 x 8192 x 8192, bf16), measured in the same run.

  --shapes LIST     comma-separated names or substrings (default: all)
  --routing MODE    topk: k distinct experts per token, uniformly at random (default);
                    expert0: every route to expert 0 (one expert owns all T*k rows)
  --layout L        split (W_gate, W_up; default) or merged (W_gate_up)
  --warmup N        untimed runs first (default 5)
  --reps N          timed runs, median reported (default 20)
  --tokens T        run every selected shape with T tokens (e.g. 512: the host time per call
                    of a small micro-batch; printed as "host ... us per f+b call")
  --json PATH       also write the results as JSON

Shapes (T E H I k):
)";

struct Options {
    std::vector<Shape> shapes;
    std::string routing = "topk", layout = "split", json;
    int warmup = 5, reps = 20;
    int tokens = -1;  // > -1: every shape's T
};

struct UsageError : std::runtime_error { using std::runtime_error::runtime_error; };
struct Error : std::runtime_error { using std::runtime_error::runtime_error; };

// ---- the driver entry points (capi/examples/cuda_driver.h, the example's loader)
using devptr_t = cuda_devptr_t;
cuda_driver cu{};

struct DlClose { void operator()(void *lib) const { dlclose(lib); } };
using Library = std::unique_ptr<void, DlClose>;

Library load_driver() {
    char err[256];
    Library lib(cuda_driver_load(&cu, err, sizeof err));
    if (!lib) throw Error(err);
    return lib;
}

void cu_check(int rc, const char *call) {
    if (rc == 0) return;
    const char *name = nullptr;
    if (cu.get_error_name(rc, &name) != 0 || !name) name = "unknown";
    throw Error(fmt::format("{} failed: CUDA error {} ({})", call, rc, name));
}
void mj_check(moejit_status_t status, const char *call) {
    if (status == MOEJIT_SUCCESS) return;
    throw Error(fmt::format("{} failed: {}: {}", call, moejit_status_string(status),
                            moejit_last_error()));
}
#define CU(call) cu_check((call), #call)
#define MJ(call) mj_check((call), #call)

// ---- RAII owners; teardown errors are ignored: nothing useful can be done with them.
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) {
        if (bytes) CU(cu.mem_alloc(&ptr_, bytes));
    }
    DeviceBuffer(DeviceBuffer &&other) noexcept : ptr_(std::exchange(other.ptr_, 0)) {}
    DeviceBuffer &operator=(DeviceBuffer &&) = delete;
    ~DeviceBuffer() {
        if (ptr_) cu.mem_free(ptr_);
    }
    devptr_t dev() const { return ptr_; }
    void *get() const { return reinterpret_cast<void *>(static_cast<uintptr_t>(ptr_)); }

private:
    devptr_t ptr_ = 0;
};

struct StreamDestroy { void operator()(void *s) const { cu.stream_destroy(s); } };
struct EventDestroy { void operator()(void *e) const { cu.event_destroy(e); } };
using Stream = std::unique_ptr<void, StreamDestroy>;
using Event = std::unique_ptr<void, EventDestroy>;

// Holds the device's primary context, the one moejit uses, so our allocations live in it.
struct PrimaryContext {
    int device = 0;
    explicit PrimaryContext(int ordinal) : device(ordinal) {
        void *ctx = nullptr;
        CU(cu.primary_ctx_retain(&ctx, device));
        if (int rc = cu.ctx_set_current(ctx); rc != 0) {
            cu.primary_ctx_release(device);
            cu_check(rc, "cuCtxSetCurrent");
        }
    }
    PrimaryContext(const PrimaryContext &) = delete;
    PrimaryContext &operator=(const PrimaryContext &) = delete;
    ~PrimaryContext() { cu.primary_ctx_release(device); }
};

DeviceBuffer upload(const void *host, size_t bytes) {
    DeviceBuffer buf(bytes);
    if (bytes) CU(cu.memcpy_htod(buf.dev(), host, bytes));
    return buf;
}

uint16_t to_bf16(float f) { // round to nearest even
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

// Random bf16 tensors. Normal samples are drawn once and tiled (from a random offset per tensor):
// drawing billions of them for deepseek-v3's weights would take minutes, and the kernels' speed
// does not depend on the values being independent.
class RandomFill {
public:
    explicit RandomFill(uint64_t seed) : rng_(seed), pool_(size_t{1} << 23) {
        std::normal_distribution<float> normal;
        for (float &v : pool_) v = normal(rng_);
    }
    DeviceBuffer bf16(size_t n, float scale) {
        DeviceBuffer buf(n * 2);
        if (n == 0) return buf;
        std::vector<uint16_t> chunk(pool_.size());
        const size_t start = rng_() % pool_.size();
        for (size_t i = 0; i < chunk.size(); ++i)
            chunk[i] = to_bf16(scale * pool_[(start + i) % pool_.size()]);
        for (size_t done = 0; done < n; done += chunk.size())
            CU(cu.memcpy_htod(buf.dev() + done * 2, chunk.data(),
                              std::min(chunk.size(), n - done) * 2));
        return buf;
    }
    std::mt19937_64 &rng() { return rng_; }

private:
    std::mt19937_64 rng_;
    std::vector<float> pool_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median milliseconds of `reps` runs of fn between events on `stream`, after `warmup` runs;
// `host_us`, when given, receives the median host time of one fn() call (the C calls alone:
// argument checks and launches, the kernels only queued).
template <class F> double time_ms(void *stream, int warmup, int reps, F &&fn, double *host_us = nullptr) {
    for (int i = 0; i < warmup; ++i) fn();
    CU(cu.stream_synchronize(stream));
    std::vector<Event> start, stop;
    for (int i = 0; i < reps; ++i) {
        void *a = nullptr, *b = nullptr;
        CU(cu.event_create(&a, 0));
        start.emplace_back(a);
        CU(cu.event_create(&b, 0));
        stop.emplace_back(b);
    }
    std::vector<double> host;
    for (int i = 0; i < reps; ++i) {
        CU(cu.event_record(start[i].get(), stream));
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        host.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        CU(cu.event_record(stop[i].get(), stream));
    }
    CU(cu.event_synchronize(stop.back().get()));
    if (host_us) *host_us = median(host);
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
        float elapsed = 0;
        CU(cu.event_elapsed_time(&elapsed, start[i].get(), stop[i].get()));
        ms.push_back(elapsed);
    }
    return median(ms);
}

// The practical ceiling: one 8192^3 bf16 GEMM through moejit's grouped GEMM with one expert.
double dense_tflops(moejit_context_t ctx, void *stream, RandomFill &fill, const Options &o) {
    constexpr int64_t n = 8192;
    DeviceBuffer a = fill.bf16(n * n, 1.0f), b = fill.bf16(n * n, 1.0f), c(n * n * 2);
    const int32_t host_offsets[2] = {0, static_cast<int32_t>(n)};
    DeviceBuffer offsets = upload(host_offsets, sizeof host_offsets);
    moejit_group_gemm_nk_args_t args;
    MJ(moejit_group_gemm_nk_args_init(&args));
    args.dtype = args.c_dtype = MOEJIT_DTYPE_BF16;
    args.rows = args.n = args.k = n;
    args.num_experts = 1;
    args.b_transposed = 1;
    args.a = a.get();
    args.b = b.get();
    args.c = c.get();
    args.offsets = static_cast<const int32_t *>(offsets.get());
    args.stream = stream;
    // At least one untimed run: the first call JIT-compiles, which the events would include.
    const double ms = time_ms(stream, std::max(o.warmup, 1), std::max(o.reps, 10),
                              [&] { MJ(moejit_group_gemm_same_nk(ctx, &args)); });
    return 2.0 * n * n * n / (ms * 1e-3) / 1e12;
}

struct Row {
    Shape shape{};
    double plan_ms = NAN, fwd_ms = NAN, fb_ms = NAN, fb_host_us = NAN;
    uint64_t compiles = 0;
    std::string error;
    double flops_fwd() const { return 6.0 * shape.T * shape.k * shape.H * shape.I; }
    double fwd_tflops() const { return flops_fwd() / (fwd_ms * 1e-3) / 1e12; }
    double fb_tflops() const { return 3 * flops_fwd() / (fb_ms * 1e-3) / 1e12; }
    double bwd_tflops() const {
        return fb_ms > fwd_ms ? 2 * flops_fwd() / ((fb_ms - fwd_ms) * 1e-3) / 1e12 : NAN;
    }
};

// Empty, or what is wrong with a bf16 device tensor (a broken kernel is not a fast one).
std::string check_finite(const DeviceBuffer &buf, size_t n, const char *what) {
    std::vector<uint16_t> host(n);
    CU(cu.memcpy_dtoh(host.data(), buf.dev(), n * 2));
    bool nonzero = false;
    for (uint16_t h : host) {
        if ((h & 0x7F80u) == 0x7F80u) return fmt::format("{} has inf/nan", what);
        nonzero |= (h & 0x7FFFu) != 0;
    }
    return nonzero ? "" : fmt::format("{} is all zero", what);
}

Row run_shape(const moejit::api::Context &ctx, void *stream, const Shape &s, const Options &o,
              RandomFill &fill) {
    Row row;
    row.shape = s;
    try {
        const bool merged = o.layout == "merged";
        moejit_plan_desc_t desc;
        MJ(layer_desc_init(&desc, s.H, s.I, s.E, s.k));
        desc.dtype = MOEJIT_DTYPE_BF16;
        desc.fc1_layout = merged ? MOEJIT_FC1_MERGED : MOEJIT_FC1_SPLIT;
        desc.activation = MOEJIT_ACTIVATION_SWIGLU;
        desc.weight_grad_dtype = MOEJIT_DTYPE_BF16; // what autograd gives bf16 weights
        desc.index_dtype = MOEJIT_DTYPE_INT32;
        desc.routing_dtype = MOEJIT_DTYPE_FP32;
        desc.tokens_hint = s.T;
        const std::uint64_t compiles_before = ctx.cache_stats().compiles;
        const auto t0 = std::chrono::steady_clock::now();
        const moejit::api::Plan plan(ctx, desc); // JIT-compiles or loads every kernel
        row.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        row.compiles = ctx.cache_stats().compiles - compiles_before;
        const size_t saved_size = plan.saved_size(s.T);
        const size_t ws_size = plan.workspace_size(s.T); // serves forward and backward
        fmt::print(stderr, "[{}] plan {:.1f} ms ({} kernels compiled), saved {:.1f} MiB, workspace {:.1f} MiB\n",
                   s.name, row.plan_ms, row.compiles, saved_size / 1048576.0, ws_size / 1048576.0);

        // Routing on the host, fixed seed: [T,k] int32 ids and fp32 weights summing to 1 per token.
        const size_t routes = static_cast<size_t>(s.T) * s.k;
        std::vector<int32_t> ids(routes, 0);
        std::vector<float> weights(routes);
        auto &rng = fill.rng();
        std::uniform_int_distribution<int32_t> pick(0, s.E - 1);
        std::uniform_real_distribution<float> positive(0.1f, 1.1f);
        for (size_t t = 0; t < routes; t += s.k) {
            float sum = 0;
            for (size_t j = t; j < t + s.k; ++j) {
                if (o.routing == "topk")
                    do ids[j] = pick(rng); // distinct experts: redraw duplicates
                    while (std::find(&ids[t], &ids[j], ids[j]) != &ids[j]);
                sum += weights[j] = positive(rng);
            }
            for (size_t j = t; j < t + s.k; ++j) weights[j] /= sum;
        }
        DeviceBuffer d_ids = upload(ids.data(), routes * sizeof(int32_t));
        DeviceBuffer d_weights = upload(weights.data(), routes * sizeof(float));

        const size_t TH = static_cast<size_t>(s.T) * s.H, EIH = static_cast<size_t>(s.E) * s.I * s.H;
        const float fc1_scale = 1.0f / std::sqrt(float(s.H)), fc2_scale = 1.0f / std::sqrt(float(s.I));
        DeviceBuffer x = fill.bf16(TH, 0.5f), dout = fill.bf16(TH, 0.5f);
        DeviceBuffer w_gate = fill.bf16(merged ? 0 : EIH, fc1_scale);
        DeviceBuffer w_up = fill.bf16(merged ? 0 : EIH, fc1_scale);
        DeviceBuffer w_gate_up = fill.bf16(merged ? 2 * EIH : 0, fc1_scale);
        DeviceBuffer w_down = fill.bf16(EIH, fc2_scale);
        DeviceBuffer out(TH * 2), dx(TH * 2), d_rw(routes * sizeof(float));
        DeviceBuffer dw_gate(merged ? 0 : EIH * 2), dw_up(merged ? 0 : EIH * 2);
        DeviceBuffer dw_gate_up(merged ? 4 * EIH : 0), dw_down(EIH * 2);
        DeviceBuffer saved(saved_size), workspace(ws_size);

        moejit_forward_args_t fwd;
        MJ(moejit_forward_args_init(&fwd));
        fwd.num_tokens = s.T;
        fwd.x = x.get();
        fwd.selected_experts = d_ids.get();
        fwd.routing_weights = d_weights.get();
        // w_gate and w_up NULL in the merged layout, like w_gate_up in the split one
        fwd.w_gate = w_gate.get(), fwd.w_up = w_up.get(), fwd.w_gate_up = w_gate_up.get();
        fwd.w_down = w_down.get();
        fwd.out = out.get();
        fwd.saved = saved.get(), fwd.saved_size = saved_size;
        fwd.workspace = workspace.get(), fwd.workspace_size = ws_size;
        fwd.stream = stream;
        moejit_backward_args_t bwd;
        MJ(layer_backward_args(&fwd, &bwd)); // the forward's inputs, saved, workspace and stream
        bwd.dout = dout.get();
        bwd.dx = dx.get();
        bwd.d_routing_weights = d_rw.get();
        bwd.dw_gate = dw_gate.get(), bwd.dw_up = dw_up.get(), bwd.dw_gate_up = dw_gate_up.get();
        bwd.dw_down = dw_down.get();

        row.fwd_ms = time_ms(stream, o.warmup, o.reps, [&] { plan.forward(fwd); });
        row.fb_ms = time_ms(
            stream, o.warmup, o.reps,
            [&] {
                plan.forward(fwd);
                plan.backward(bwd);
            },
            &row.fb_host_us);
        row.error = check_finite(out, TH, "out");
        if (row.error.empty()) row.error = check_finite(dx, TH, "dx");
    } catch (const std::runtime_error &e) { // Error or moejit::api::Exception: report and go on,
        row.error = e.what();                // one failing shape must not hide the rest
    }
    if (std::isfinite(row.fb_ms))
        fmt::print(stderr, "[{}] fwd {:.3f} ms ({:.1f} TFLOP/s), f+b {:.3f} ms ({:.1f} TFLOP/s), host {:.1f} us per f+b call\n",
                   s.name, row.fwd_ms, row.fwd_tflops(), row.fb_ms, row.fb_tflops(), row.fb_host_us);
    if (!row.error.empty()) fmt::print(stderr, "[{}] {}\n", s.name, row.error);
    return row;
}

std::string num(double v, const char *spec) { // "-" for values not measured
    return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-";
}

std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += fmt::format("\\{}", c);
        else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", int(c));
        else out += c;
    }
    return out + "\"";
}
std::string json_num(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

int parse_int(std::string_view name, std::string_view text, int min) {
    int v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < min)
        throw UsageError(fmt::format("{}: expected an integer >= {}, got '{}'", name, min, text));
    return v;
}

Options parse_args(int argc, char **argv) {
    Options o;
    std::string shapes;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i], value;
        if (arg == "--help" || arg == "-h") {
            std::fputs(kHelp, stdout);
            for (const Shape &s : kShapes)
                fmt::print("  {:<18} {:>6} {:>4} {:>5} {:>6} {}\n", s.name, s.T, s.E, s.H, s.I, s.k);
            std::exit(0);
        }
        const size_t eq = arg.find('=');
        if (eq != arg.npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
        } else if (arg.starts_with("--")) {
            if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", arg));
            value = argv[++i];
        }
        if (arg == "--shapes") shapes = value;
        else if (arg == "--routing" && (value == "topk" || value == "expert0")) o.routing = value;
        else if (arg == "--layout" && (value == "split" || value == "merged")) o.layout = value;
        else if (arg == "--warmup") o.warmup = parse_int(arg, value, 0);
        else if (arg == "--reps") o.reps = parse_int(arg, value, 1);
        else if (arg == "--tokens") o.tokens = parse_int(arg, value, 0);
        else if (arg == "--json" && !value.empty()) o.json = value;
        else if (arg == "--shapes" || arg == "--routing" || arg == "--layout" || arg == "--json")
            throw UsageError(fmt::format("{}: invalid value '{}'", arg, value));
        else throw UsageError(fmt::format("unknown argument '{}'", argv[i]));
    }
    // An exact name selects that shape, any other word the names containing it; every word
    // must select something, so a typo is an error rather than a silently shorter run.
    std::vector<std::string> words;
    for (size_t pos = 0; pos <= shapes.size();) {
        size_t comma = std::min(shapes.find(',', pos), shapes.size());
        if (comma > pos) words.push_back(shapes.substr(pos, comma - pos));
        pos = comma + 1;
    }
    auto selects = [&](const std::string &w, const Shape &s) {
        const bool exact = std::any_of(std::begin(kShapes), std::end(kShapes),
                                       [&](const Shape &t) { return w == t.name; });
        return exact ? w == s.name : std::string_view(s.name).find(w) != std::string_view::npos;
    };
    std::string names;
    for (const Shape &s : kShapes) names += (names.empty() ? "" : ", ") + std::string(s.name);
    for (const std::string &w : words)
        if (std::none_of(std::begin(kShapes), std::end(kShapes),
                         [&](const Shape &s) { return selects(w, s); }))
            throw UsageError(fmt::format("--shapes: '{}' matches none of {}", w, names));
    for (const Shape &s : kShapes)
        if (words.empty() || std::any_of(words.begin(), words.end(),
                                         [&](const std::string &w) { return selects(w, s); }))
            o.shapes.push_back(s);
    if (o.tokens >= 0)
        for (Shape &s : o.shapes) s.T = o.tokens;
    return o;
}

int run(const Options &o) {
    std::optional<moejit::api::Context> created;
    try {
        created.emplace();
    } catch (const moejit::api::Exception &e) {
        // Without a driver or a device this is a status, not a failure.
        if (e.status() != MOEJIT_ERROR_NO_DRIVER && e.status() != MOEJIT_ERROR_NO_DEVICE) throw;
        fmt::print("moejit-bench: {}\nno GPU: nothing to benchmark\n", e.what());
        return 0;
    }
    const moejit::api::Context &ctx = *created;
    Library driver = load_driver();
    CU(cu.init(0));
    int device = 0;
    CU(cu.device_get(&device, 0)); // the moejit context's default device_ordinal
    PrimaryContext primary(device);
    char device_name[256] = {};
    CU(cu.device_get_name(device_name, sizeof device_name, device));
    void *raw_stream = nullptr;
    CU(cu.stream_create(&raw_stream, 0));
    Stream stream(raw_stream);

    const std::string header = fmt::format(
        "moejit {} on {}, bf16, {}, routing {}, warmup {}, reps {}; {}", moejit_version(),
        device_name, o.layout, o.routing, o.warmup, o.reps, kPeers);
    fmt::print(stderr, "{}\n", header);
    RandomFill fill(0);
    double dense = NAN;
    try {
        dense = dense_tflops(ctx.get(), stream.get(), fill, o);
        fmt::print(stderr, "dense 8192^3 bf16 GEMM (moejit, 1 expert): {:.1f} TFLOP/s\n", dense);
    } catch (const Error &e) {
        fmt::print(stderr, "dense ceiling failed: {}\n", e.what());
    }
    std::vector<Row> rows;
    for (const Shape &s : o.shapes) rows.push_back(run_shape(ctx, stream.get(), s, o, fill));

    int rc = std::isfinite(dense) ? 0 : 1;
    std::string table = fmt::format("{}\ndense 8192^3 GEMM ceiling (moejit_group_gemm_same_nk, 1 expert): {} TFLOP/s\n",
                                    header, num(dense, "{:.0f}"));
    const std::string cols = fmt::format("{:<18} {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  note", "shape",
                                         "routing", "plan ms", "fwd ms", "fwd TF/s", "f+b ms", "f+b TF/s", "of dense",
                                         "host us");
    table += cols + "\n" + std::string(cols.size(), '-') + "\n";
    std::string json = fmt::format(
        "{{\n  \"device\": {}, \"moejit\": {}, \"dtype\": \"bf16\", \"layout\": {}, \"routing\": {},\n"
        "  \"warmup\": {}, \"reps\": {}, \"dense_tflops\": {}, \"peers\": {},\n  \"results\": [",
        json_string(device_name), json_string(moejit_version()), json_string(o.layout),
        json_string(o.routing), o.warmup, o.reps, json_num(dense), json_string(kPeers));
    for (size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        const double of_dense = r.fb_tflops() / dense;
        if (!r.error.empty()) rc = 1;
        table += fmt::format("{:<18} {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {}\n", r.shape.name, o.routing,
                             num(r.plan_ms, "{:.1f}"), num(r.fwd_ms, "{:.3f}"), num(r.fwd_tflops(), "{:.1f}"),
                             num(r.fb_ms, "{:.3f}"), num(r.fb_tflops(), "{:.1f}"),
                             num(100 * of_dense, "{:.1f}%"), num(r.fb_host_us, "{:.1f}"), r.error);
        json += fmt::format(
            "{}\n    {{\"shape\": {}, \"T\": {}, \"E\": {}, \"H\": {}, \"I\": {}, \"k\": {}, \"routing\": {}, "
            "\"plan_ms\": {}, \"jit_compiles\": {}, \"fwd_ms\": {}, \"fwd_tflops\": {}, \"fwd_bwd_ms\": {}, "
            "\"fwd_bwd_tflops\": {}, \"bwd_tflops\": {}, \"fwd_bwd_of_dense\": {}, \"fwd_bwd_host_us\": {}, \"error\": {}}}",
            i ? "," : "", json_string(r.shape.name), r.shape.T, r.shape.E, r.shape.H, r.shape.I, r.shape.k,
            json_string(o.routing), json_num(r.plan_ms), r.compiles, json_num(r.fwd_ms),
            json_num(r.fwd_tflops()), json_num(r.fb_ms), json_num(r.fb_tflops()), json_num(r.bwd_tflops()),
            json_num(of_dense), json_num(r.fb_host_us), r.error.empty() ? "null" : json_string(r.error));
    }
    json += "\n  ]\n}\n";
    if (!o.json.empty()) {
        std::unique_ptr<std::FILE, int (*)(std::FILE *)> f(std::fopen(o.json.c_str(), "w"), std::fclose);
        if (!f || std::fputs(json.c_str(), f.get()) < 0 || std::fflush(f.get()) != 0) {
            fmt::print(stderr, "moejit-bench: could not write --json {}: {}\n", o.json, std::strerror(errno));
            rc = 1;
        }
    }
    std::fputs(table.c_str(), stdout);
    return rc;
}

} // namespace

int main(int argc, char **argv) {
    Options options;
    try {
        options = parse_args(argc, argv);
    } catch (const UsageError &e) {
        fmt::print(stderr, "moejit-bench: {}\n(see moejit-bench --help)\n", e.what());
        return 2;
    }
    try {
        return run(options);
    } catch (const std::runtime_error &e) {  // Error or moejit::api::Exception
        fmt::print(stderr, "moejit-bench: {}\n", e.what());
        return 1;
    }
}
