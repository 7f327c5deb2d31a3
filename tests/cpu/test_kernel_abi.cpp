// The typed kernel ABI (docs/DESIGN.md §4.1): every rendered kernel is an explicit
// instantiation of a kernel template taking one argument struct of templates/kernel_args.h, no
// extern "C" signature is glued on the host, the expected parameter size travels with the
// source, the load-time layout comparison names what differs, and the disk cache keeps the
// lowered name NVRTC gave the kernel.
#define BOOST_TEST_MODULE kernel_abi
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "compile_only.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/jit_engine.hpp"
#include "runtime/kernel_source.hpp"
#include "ops/expert_bias.hpp"
#include "ops/expert_rows.hpp"
#include "gemm/group_gemm.hpp"
#include "gemm/group_gemm_sm90.hpp"
#include "ops/routing.hpp"
#include "ops/scatter_gather.hpp"
#include "ops/swiglu.hpp"
#include "fp8/fp8.hpp"

using namespace moejit;
namespace fs = std::filesystem;

namespace {

constexpr int kHopper = 90, kAmpere = 80;

struct Rendered {
    KernelSource source;
    const char *args_type;
    std::size_t args_bytes;
};
template <class Args> Rendered typed(KernelSource ks) { return {std::move(ks), kernel_args_type<Args>, sizeof(Args)}; }

// One kernel of every family, on both GEMM engines.
std::vector<Rendered> every_family() {
    std::vector<Rendered> out;
    const RoutingKernels routing = render_routing_index(RoutingSpec{DType::int64, 128});
    out.push_back(typed<moejit::kargs::RoutingHistogramArgs>(routing.histogram));
    out.push_back(typed<moejit::kargs::RoutingRowScanArgs>(routing.row_scan));
    out.push_back(typed<moejit::kargs::RoutingRankArgs>(routing.rank));
    out.push_back(typed<moejit::kargs::ScatterArgs>(render_scatter(ScatterSpec{DType::bf16, 2048, 8})));
    out.push_back(typed<moejit::kargs::GatherArgs>(render_gather(GatherSpec{DType::bf16, 2048, 8, DType::fp32, true})));
    out.push_back(typed<moejit::kargs::ScatterWeightsArgs>(render_scatter_weights(DType::fp32)));
    out.push_back(typed<moejit::kargs::GatherWeightsArgs>(render_gather_weights(DType::bf16)));
    SwigluSpec glu;
    glu.intermediate = 768;
    glu.merged = glu.interleaved = glu.has_bias = glu.has_limit = glu.has_weights = true;
    glu.activation = Activation::gpt_oss;
    out.push_back(typed<moejit::kargs::GatedForwardArgs>(render_swiglu_forward(glu)));
    out.push_back(typed<moejit::kargs::GatedBackwardArgs>(render_swiglu_backward(glu)));
    const BiasGradSpec bias{DType::bf16, DType::fp32, true, true};
    out.push_back(typed<moejit::kargs::BiasPartialArgs>(render_bias_grad_partial(bias)));
    out.push_back(typed<moejit::kargs::BiasReduceArgs>(render_bias_grad_reduce(bias)));
    out.push_back(typed<moejit::kargs::BiasRowDotArgs>(render_bias_row_dot(DType::fp16)));
    out.push_back(typed<moejit::kargs::PrepareRowsArgs>(render_prepare_rows(true, true)));
    out.push_back(typed<moejit::kargs::AddRowBiasArgs>(render_add_row_bias(DType::bf16)));
    out.push_back(typed<moejit::kargs::CheckOffsetsArgs>(render_check_offsets()));
    out.push_back(typed<moejit::kargs::ZeroUnassignedRowsArgs>(render_zero_unassigned_rows()));
    out.push_back(typed<moejit::kargs::GemmNkArgs>(
        render_group_gemm_nk(make_nk_spec(DType::bf16, DType::bf16, 768, 2048, true, false, 0, 128, kAmpere))));
    out.push_back(typed<moejit::kargs::GemmMnArgs>(
        render_group_gemm_mn(make_mn_spec(DType::bf16, DType::fp32, 2048, 768, true, 0, 128, kAmpere))));
    const GemmMnSpec mn90 = make_mn_spec(DType::bf16, DType::fp32, 2048, 768, true, 0, 128, kHopper);
    out.push_back(typed<moejit::kargs::Sm90NkArgs>(
        render_group_gemm_nk(make_nk_spec(DType::bf16, DType::bf16, 768, 2048, true, false, 0, 128, kHopper))));
    out.push_back(typed<moejit::kargs::Sm90MnArgs>(render_group_gemm_mn(mn90)));
    out.push_back(typed<moejit::kargs::SplitReduceArgs>(render_split_reduce_sm90(mn90)));
    out.push_back(typed<moejit::kargs::Fp8QuantRowsArgs>(render_fp8_quant_rows({2048})));
    out.push_back(typed<moejit::kargs::Fp8QuantBlocksArgs>(render_fp8_quant_blocks({1536, 2048})));
    out.push_back(typed<moejit::kargs::Sm90Fp8NkArgs>(
        render_fp8_group_gemm_nk(make_fp8_gemm_spec(1536, 2048, DType::bf16, 128))));
    out.push_back(typed<moejit::kargs::Fp8QuantColsArgs>(render_fp8_quant_cols({2048})));
    out.push_back(typed<moejit::kargs::Sm90Fp8WgradArgs>(
        render_fp8_wgrad_gemm(make_fp8_wgrad_spec(1536, 2048, DType::bf16, 128))));
    return out;
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(every_family_renders_an_explicit_instantiation_of_its_args_struct) {
    for (const Rendered &r : every_family()) {
        const KernelSource &ks = r.source;
        BOOST_TEST_CONTEXT(ks.name) {
            BOOST_TEST(!contains(ks.source, "extern \"C\""), ks.source);
            BOOST_TEST(!contains(ks.source, "__launch_bounds__"), "bounds are the template's, not the host's");
            const std::string instantiation = "template __global__ void " + ks.entry + "(const __grid_constant__ " +
                                              r.args_type + ");\n";
            BOOST_TEST(contains(ks.source, instantiation), ks.source);
            BOOST_TEST(ks.param_bytes == r.args_bytes);
            BOOST_TEST(ks.entry.find('<') != std::string::npos, ks.entry);
            BOOST_TEST(ks.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos);
        }
    }
}

// Plain structs the host copies bytewise into the launch and the device reads from parameter
// space; the tensor maps keep CUtensorMap's size and TMA's 64-byte alignment.
BOOST_AUTO_TEST_CASE(argument_structs_are_plain_data) {
#define MOEJIT_CHECK_PLAIN(T)                                                   \
    static_assert(std::is_trivially_copyable_v<moejit::kargs::T>, #T);                   \
    static_assert(std::is_standard_layout_v<moejit::kargs::T>, #T);                      \
    BOOST_TEST(std::string(kernel_args_type<moejit::kargs::T>) == "moejit::kargs::" #T);
    MOEJIT_KERNEL_ARGS(MOEJIT_CHECK_PLAIN)
#undef MOEJIT_CHECK_PLAIN
    static_assert(sizeof(moejit::kargs::TmaDesc) == 128 && alignof(moejit::kargs::TmaDesc) == 64);
    static_assert(alignof(moejit::kargs::Sm90NkArgs) == 64 && offsetof(moejit::kargs::Sm90NkArgs, tma_c2) == 5 * 128);
    BOOST_TEST(sizeof(moejit::kargs::Sm90NkArgs) <= 4096u, "within the classic 4 KiB parameter limit");
}

BOOST_AUTO_TEST_CASE(param_layout_mismatch_names_kernel_and_sizes) {
    ParamLayout ok;
    ok.checked = true;
    ok.count = 1;
    ok.size = 896;
    BOOST_TEST(!param_layout_mismatch("k", 896, ok).has_value());
    ParamLayout unchecked;  // a driver without cuFuncGetParamInfo: nothing to compare
    BOOST_TEST(!param_layout_mismatch("k", 896, unchecked).has_value());

    ParamLayout smaller = ok;
    smaller.size = 888;
    const auto why = param_layout_mismatch("group_gemm_nk_x", 896, smaller);
    BOOST_REQUIRE(why.has_value());
    BOOST_TEST(contains(*why, "group_gemm_nk_x"), *why);
    BOOST_TEST(contains(*why, "888"), *why);
    BOOST_TEST(contains(*why, "896"), *why);

    // The driver pads a 64-byte aligned struct past the parameter space's fixed prefix (the H200
    // reported offset 48): the offset says nothing about the struct.
    ParamLayout padded = ok;
    padded.offset = 48;
    BOOST_TEST(!param_layout_mismatch("k", 896, padded).has_value());
    ParamLayout two = ok;
    two.count = 2;
    BOOST_REQUIRE(param_layout_mismatch("k", 896, two).has_value());
    BOOST_TEST(contains(*param_layout_mismatch("k", 896, two), "exactly one"));
    ParamLayout none = ok;
    none.count = 0;
    BOOST_TEST(param_layout_mismatch("k", 896, none).has_value());
}

namespace {
std::vector<fs::path> cubin_entries(const fs::path &dir) {
    std::vector<fs::path> out;
    for (const auto &e : fs::directory_iterator(dir))
        if (e.path().extension() == ".cubin") out.push_back(e.path());
    return out;
}
JitOptions compile_only(const std::string &dir) {
    JitOptions o;
    o.arch = "sm_80";
    o.load_modules = false;
    o.cache_dir = dir;
    return o;
}
}  // namespace

// NVRTC's lowered name (a mangled template instantiation) is stored in the entry before the
// cubin, under the checksum, so a disk hit finds the function without compiling.
BOOST_AUTO_TEST_CASE(disk_entry_keeps_the_lowered_name) {
    test::TempDir dir;
    const KernelSource ks = render_prepare_rows(true, false);
    { JitEngine(compile_only(dir.string())).get(ks); }
    const auto files = cubin_entries(dir.path());
    BOOST_REQUIRE(files.size() == 1u);
    DiskCache disk(dir.string(), Logger{});
    CachedKernel entry;
    BOOST_REQUIRE((disk.load(ks.name, JitEngine(compile_only("")).key(ks), entry) == DiskCache::Lookup::hit));
    BOOST_TEST(entry.function.rfind("_Z", 0) == 0u, entry.function);
    BOOST_TEST(contains(entry.function, "prepare_kernel"), entry.function);
    BOOST_TEST(entry.cubin.size() > 4u);
    BOOST_TEST((std::string(entry.cubin.begin(), entry.cubin.begin() + 4) == "\x7f" "ELF"));

    // A name that cannot be stored is not published (memory only), never written half.
    const CachedKernel nameless{"", {'x'}};
    BOOST_TEST(!disk.store("nameless", JitEngine(compile_only("")).key(ks), nameless));

    // A second engine is served from disk.
    JitEngine again(compile_only(dir.string()));
    again.get(ks);
    BOOST_TEST(again.counters().disk_hits == 1u);
    BOOST_TEST(again.counters().compiles == 0u);
}
