// moejit-warmup: compiles every kernel the MoE layer plans of a model need into the disk cache,
// checks that a cache covers a model (JIT off), shows and clears the cache. Uses only the
// public C ABI (moejit.h), so it doubles as an example of it.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "moejit.h"
#include "warmup/cache_folder.hpp"
#include "warmup/model_spec.hpp"
#include "warmup/reporter.hpp"
#include "warmup/runner.hpp"
#include "warmup/variants.hpp"

using namespace warmup;

namespace {

enum ExitCode {
    exit_ok = 0,
    exit_compile_failures = 1,
    exit_usage = 2,
    exit_missing = 3,
    exit_other = 4,
    exit_not_stored = 5,
    exit_cache_unwritable = 6,
};

// A failure that ends the run with `code`; the message is printed to stderr.
struct Failure {
    int code;
    std::string message;
};

const char *kHelp = R"(usage: moejit-warmup [--preset NAME | --spec H,I,E,k[,limit] | --spec-file FILE]...
                     [--arch ARCH] [--cache-dir DIR] [--jobs N] [--dtype bf16|fp16]
                     [--tokens-hint N[,N...]] [--gather on|off] [--fuse-swiglu on|off]
                     [--gemm-tile TILE|heuristic] [--recipe bf16|fp8-block] [--check] [--verbose]
       moejit-warmup --info | --clear [--cache-dir DIR]
       moejit-warmup --list-presets | --help | --version

Compiles every kernel that moejit layer plans of the given shapes need into the disk cache, so
that training starts without JIT compilation. All plan variants are covered: fc1 layouts split
and merged; dtypes bf16 and fp16 (or --dtype); weight gradients in the dtype, in fp32 and
accumulated in fp32; int64 and int32 expert indices; routing weights in the dtype or fp32.

Layer shapes (each may be repeated and mixed):
  --preset NAME          a model preset (--list-presets)
  --spec H,I,E,k[,L]     hidden size, moe intermediate size, experts, top-k, optional swiglu limit
  --spec-file FILE       JSON list of {"hidden": H, "intermediate": I, "experts": E, "top_k": k,
                         "swiglu_limit": L (optional), "name": "..." (optional)}

Options:
  --arch ARCH            target, e.g. sm_90a (Hopper), sm_80; needed without a GPU. Default:
                         the arch of CUDA device 0
  --cache-dir DIR        cache root (default: $MOEJIT_CACHE_DIR, else $XDG_CACHE_HOME/moejit,
                         else ~/.cache/moejit); the library version is appended as a sub-folder
  --jobs N               plan variants warmed at once, a thread each (default: the number of
                         usable cores); within a plan, compiles run in parallel too, in worker
                         processes when four or more run at once (MOEJIT_COMPILE_WORKERS)
  --dtype bf16|fp16      warm only this layer dtype (default: both)
  --tokens-hint N[,N..]  typical token counts per micro-batch (guide tile choice; default 0)
  --recipe bf16|fp8-block
                         the plans' recipe (desc->recipe; default bf16). fp8-block warms the FP8
                         block-scaled plans (their quantizers and FP8 GEMMs and the bf16 kernels
                         they keep): bf16 layers only (implies --dtype bf16), sm_90a only, H and I
                         multiples of 128; gpt-oss presets are refused (no FP8 form yet)
  --check                compile nothing (JIT off): exit 3 and list what is missing if the cache
                         does not cover every plan variant; changes nothing on disk (a corrupt
                         entry is reported, not removed)
  --info                 show the cache folder, its entries and size, library and NVRTC versions;
                         changes nothing on disk (a missing folder is not created)
  --clear                remove the cache entries (*.cubin) and stale temp files of this library
                         version's cache folder; other files are left alone
  --verbose              per-kernel compile times and library messages

Plan configuration (the library's context options; each flag left out takes its MOEJIT_*
environment variable, else the library's default, as a context created without the option):
  --gather on|off        fc1 gathers x's rows (options->gather, MOEJIT_GATHER; default: on
                         where I <= 2048 on sm_90a)
  --fuse-swiglu on|off   SwiGLU in fc1's epilogue (options->fuse_swiglu, MOEJIT_FUSE_SWIGLU;
                         default off)
  --gemm-tile TILE       one tile for every grouped GEMM, e.g. wgmma_128x256x64_s3_g8_e1, or
                         "heuristic" for the heuristic's whatever MOEJIT_GEMM_TILE says
                         (options->gemm_tile, MOEJIT_GEMM_TILE)
The kernels warmed (and checked) are exactly those a plan loads on a context with the same
configuration: give the options (or set the variables) the job that uses the cache runs with.
Tuning (options->tune, MOEJIT_TUNE) loads no other kernel at plan creation: its candidate tiles
compile at each GEMM problem's first call, so it has no flag here.
  --list-presets         list the model presets
  --version              print the library and NVRTC versions

Output: one line per plan variant (a progress bar on a terminal), then
  summary: kernels: K  compiled: C  hits: H  rejected: R  failures: F  missing: M  wall: S s
(K kernel lookups = C compiled now + H found in the cache + misses that failed; R entries that
could not be used (corrupt, not a regular file, too large): recompiled and replaced, or with
--check only reported; F plan variants that failed; M plan variants not covered (--check)).

Exit status:
  0  success (--check: the cache covers everything)
  1  some kernels failed to compile (the NVRTC log is printed)
  2  usage error: unknown option or preset, malformed spec, a shape the library rejects
  3  --check: kernels are missing from the cache (listed)
  4  other errors: no GPU and no --arch, a cache folder the library refuses (see below),
     unsupported configuration
  5  some compiled kernels could not be stored in the cache folder (disk full, unwritable;
     the library's warnings say why): the cache does not cover the model
  6  the cache folder cannot be created or written (checked before anything compiles; the
     message names the path and the reason): pass a writable --cache-dir

The cache folder is used only if nobody else can write it (owned by you, not writable by group
or others; see the README, "Warm-up and deployment"): otherwise the library refuses it with one
warning, and a warmup exits 4.
)";

struct Args {
    std::vector<ModelSpec> specs;
    std::optional<std::string> arch, cache_dir;
    int jobs = 0;
    VariantOptions variants;
    RunOptions run;  // the plan configuration flags (arch, cache and check are set in run_main)
    bool check = false, info = false, clear = false, verbose = false, list = false, help = false,
         version = false;
};

int usable_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
}

std::int64_t parse_count(const std::string &option, const std::string &text, std::int64_t lo, std::int64_t hi) {
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || errno != 0 || *end != '\0' || v < lo || v > hi)
        throw UsageError(fmt::format("{} \"{}\": expected an integer in [{}, {}]", option, text, lo, hi));
    return v;
}

Args parse_args(int argc, char **argv) {
    Args a;
    bool dtype_given = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i], value;
        bool has_inline = false;
        if (arg.rfind("--", 0) == 0) {
            if (std::size_t eq = arg.find('='); eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_inline = true;
            }
        }
        auto take = [&]() -> std::string {
            if (has_inline) return value;
            if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value (see --help)", arg));
            return argv[++i];
        };
        auto flag = [&] {
            if (has_inline) throw UsageError(fmt::format("{} takes no value", arg));
            return true;
        };
        if (arg == "--preset") a.specs.push_back(find_preset(take()));
        else if (arg == "--spec") a.specs.push_back(parse_spec(take()));
        else if (arg == "--spec-file") {
            for (ModelSpec &s : parse_spec_file(take())) a.specs.push_back(std::move(s));
        } else if (arg == "--arch") a.arch = take();
        else if (arg == "--cache-dir") {
            a.cache_dir = take();
            if (a.cache_dir->empty()) throw UsageError("--cache-dir is empty (a warmup needs a disk cache)");
        } else if (arg == "--jobs" || arg == "-j") a.jobs = static_cast<int>(parse_count(arg, take(), 1, 4096));
        else if (arg == "--dtype") {
            std::string d = take();
            if (d == "bf16") a.variants.dtypes = {MOEJIT_DTYPE_BF16};
            else if (d == "fp16") a.variants.dtypes = {MOEJIT_DTYPE_FP16};
            else throw UsageError(fmt::format("--dtype \"{}\": expected bf16 or fp16", d));
            if (dtype_given) throw UsageError("--dtype given twice (omit it to warm both dtypes)");
            dtype_given = true;
        } else if (arg == "--tokens-hint") {
            std::string text = take();
            a.variants.tokens_hints.clear();
            std::size_t start = 0;
            while (true) {
                std::size_t comma = text.find(',', start);
                a.variants.tokens_hints.push_back(
                    parse_count("--tokens-hint", text.substr(start, comma - start), 0, std::int64_t(1) << 40));
                if (comma == std::string::npos) break;
                start = comma + 1;
            }
        } else if (arg == "--recipe") {
            std::string r = take();
            if (r == "bf16") a.variants.recipe = MOEJIT_RECIPE_BF16;
            else if (r == "fp8-block") a.variants.recipe = MOEJIT_RECIPE_FP8_BLOCK;
            else throw UsageError(fmt::format("--recipe \"{}\": expected bf16 or fp8-block", r));
        } else if (arg == "--gather" || arg == "--fuse-swiglu" || arg == "--gemm-tile") {
            apply_config_flag(a.run, arg, take());
        } else if (arg == "--check") a.check = flag();
        else if (arg == "--info") a.info = flag();
        else if (arg == "--clear") a.clear = flag();
        else if (arg == "--verbose" || arg == "-v") a.verbose = flag();
        else if (arg == "--list-presets") a.list = flag();
        else if (arg == "--help" || arg == "-h") a.help = flag();
        else if (arg == "--version") a.version = flag();
        else throw UsageError(fmt::format("unknown option \"{}\" (see --help)", argv[i]));
    }
    if (a.check && a.clear)
        throw UsageError("--check and --clear together would always fail; run them separately");
    if (a.variants.recipe == MOEJIT_RECIPE_FP8_BLOCK) {
        if (dtype_given && a.variants.dtypes != std::vector<moejit_dtype_t>{MOEJIT_DTYPE_BF16})
            throw UsageError("--recipe fp8-block runs bf16 layers only; drop --dtype fp16");
        a.variants.dtypes = {MOEJIT_DTYPE_BF16};
    }
    if (!a.help && !a.list && !a.version && !a.info && !a.clear && a.specs.empty())
        throw UsageError("nothing to do: give --preset NAME, --spec H,I,E,k or --spec-file FILE "
                         "(or --info, --clear, --list-presets; see --help)");
    return a;
}

std::string nvrtc_version_text() {
    int v = 0;
    if (moejit_nvrtc_version(&v) != MOEJIT_SUCCESS) return fmt::format("unknown ({})", moejit_last_error());
    return fmt::format("{}.{}", v / 100, v % 100);
}

void print_presets() {
    fmt::print("{:<18} {:>7} {:>13} {:>8} {:>6} {:>13}  {}\n", "preset", "hidden", "intermediate", "experts",
               "top_k", "swiglu_limit", "model");
    for (const Preset &p : presets())
        fmt::print("{:<18} {:>7} {:>13} {:>8} {:>6} {:>13}  {}\n", p.name, p.spec.hidden, p.spec.intermediate,
                   p.spec.experts, p.spec.top_k, p.spec.swiglu_limit > 0 ? fmt::format("{:g}", p.spec.swiglu_limit) : "-",
                   p.note);
}

struct ContextDeleter {
    void operator()(moejit_context_t c) const noexcept { moejit_context_destroy(c); }
};
using ContextPtr = std::unique_ptr<moejit_context_s, ContextDeleter>;

// The device's own arch, from a normal context on device 0 (memory-only cache: it compiles
// nothing and should leave no folder behind).
std::string device_arch() {
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.cache_dir = "";
    moejit_context_t raw = nullptr;
    moejit_status_t st = moejit_context_create(&o, &raw);
    if (st != MOEJIT_SUCCESS)
        throw Failure{exit_other, fmt::format("no usable GPU to take the target arch from ({}: {}); pass --arch, "
                                              "e.g. --arch sm_90a for H100/H200",
                                              moejit_status_string(st), moejit_last_error())};
    ContextPtr ctx(raw);
    const char *arch = nullptr;
    if (moejit_context_arch(ctx.get(), &arch) != MOEJIT_SUCCESS)
        throw Failure{exit_other, fmt::format("moejit_context_arch failed: {}", moejit_last_error())};
    return arch;
}

// A compile-only context with the run's settings, used to validate the arch, locate the cache
// folder and validate the specs; it also creates the folder.
ContextPtr probe_context(const RunOptions &run, Reporter &reporter) {
    moejit_status_t st;
    std::string message;
    ContextPtr ctx(create_worker_context(run, &reporter, st, message));
    if (!ctx) {
        int code = st == MOEJIT_ERROR_INVALID_ARGUMENT ? exit_usage : exit_other;
        throw Failure{code, fmt::format("cannot create a compile-only context for --arch {} ({}): {}", run.arch,
                                        moejit_status_string(st), message)};
    }
    return ctx;
}

std::string cache_folder_of(moejit_context_t ctx) {
    const char *dir = nullptr;
    if (moejit_context_cache_dir(ctx, &dir) != MOEJIT_SUCCESS)
        throw Failure{exit_other, fmt::format("moejit_context_cache_dir failed: {}", moejit_last_error())};
    return dir ? dir : "";
}

// Rejects a spec the library considers invalid before any work starts: moejit_plan_warmup
// validates the descriptor first, and on a JIT-off, memory-only context it then stops at the
// first kernel without touching the disk cache (whose statistics the run reports).
void validate_specs(const std::vector<WarmupJob> &jobs, RunOptions run, Reporter &reporter) {
    run.check = true;
    run.cache_dir = "";
    ContextPtr ctx = probe_context(run, reporter);
    for (const WarmupJob &job : jobs) {
        if (job.wave != 0) continue;  // the base variant of each spec and dtype
        moejit_status_t st = moejit_plan_warmup(ctx.get(), &job.desc, nullptr);
        if (st == MOEJIT_ERROR_INVALID_ARGUMENT)
            throw Failure{exit_usage, fmt::format("the library rejects the layer {}: {}", job.label, moejit_last_error())};
        if (st == MOEJIT_ERROR_UNSUPPORTED)  // e.g. a forced tile (--gemm-tile, MOEJIT_GEMM_TILE) that cannot run it
            throw Failure{exit_other, fmt::format("the library cannot run the layer {}: {}", job.label, moejit_last_error())};
    }
}

void print_info(const std::string &folder) {
    int header = MOEJIT_VERSION_MAJOR * 10000 + MOEJIT_VERSION_MINOR * 100 + MOEJIT_VERSION_PATCH;
    fmt::print("library: moejit {} (built against header {}{})\n", moejit_version(), MOEJIT_VERSION_STRING,
               header == moejit_version_number() ? "" : ", MISMATCH");
    fmt::print("nvrtc: {}\n", nvrtc_version_text());
    if (folder.empty()) {
        fmt::print("cache folder: none (the disk cache is disabled or unusable)\n");
        return;
    }
    FolderScan scan = scan_cache_folder(folder);
    fmt::print("cache folder: {}{}\n", folder, scan.exists ? "" : " (does not exist yet)");
    fmt::print("entries: {}  size: {} bytes ({})  on disk: {}  temp files: {}\n", scan.entries, scan.entry_bytes,
               human_bytes(scan.entry_bytes), human_bytes(scan.disk_bytes), scan.temp_files);
    // Folders of other library versions are never used by this one; name them for cleanup.
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path root = fs::path(folder).parent_path();
    std::string others;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory(ec) && it->path().filename() != fs::path(folder).filename())
            others += (others.empty() ? "" : ", ") + it->path().filename().string();
    if (!others.empty()) fmt::print("other versions under {}: {}\n", root.string(), others);
}

void clear(const std::string &folder) {
    if (folder.empty()) {
        fmt::print("cache folder: none (the disk cache is disabled or unusable); nothing to clear\n");
        return;
    }
    ClearResult r = clear_cache_folder(folder);
    fmt::print("cleared {}: removed {} entries ({}) and {} stale temp files{}\n", folder, r.removed_entries,
               human_bytes(r.removed_bytes), r.removed_temps,
               r.kept_temps ? fmt::format("; kept {} temp files of writers that may still be running", r.kept_temps)
                            : "");
    if (r.failed)
        throw Failure{exit_other, fmt::format("{} files in {} could not be removed", r.failed, folder)};
}

// Plan variants a fresh JIT-off context cannot build from the disk cache alone.
std::size_t count_not_stored(const std::vector<WarmupJob> &jobs, RunOptions run) {
    run.check = true;
    moejit_status_t st;
    std::string message;
    ContextPtr ctx(create_worker_context(run, nullptr, st, message));
    if (!ctx) throw Failure{exit_other, fmt::format("cannot create a context to verify the cache: {}", message)};
    std::size_t missing = 0;
    for (const WarmupJob &job : jobs)
        if (moejit_plan_warmup(ctx.get(), &job.desc, nullptr) != MOEJIT_SUCCESS) ++missing;
    return missing;
}

int warm(const Args &args, const RunOptions &run, Reporter &reporter, const std::string &folder) {
    moejit_plan_desc_t defaults;
    if (moejit_plan_desc_init(&defaults) != MOEJIT_SUCCESS)
        throw Failure{exit_other, fmt::format("moejit_plan_desc_init failed: {}", moejit_last_error())};
    std::vector<WarmupJob> jobs = enumerate_jobs(args.specs, args.variants, defaults);
    validate_specs(jobs, run, reporter);
    if (!run.check) {
        if (folder.empty())
            throw Failure{exit_other, "the disk cache is disabled or its folder cannot be created (see the warning "
                                      "above); a warmup would be lost. Pass --cache-dir DIR"};
        // Before minutes of NVRTC: the folder must exist (created 0700, as the library would)
        // and take a file, or every kernel compiled would be lost (exit 5 afterwards).
        if (std::string why = prepare_cache_folder(folder); !why.empty())
            throw Failure{exit_cache_unwritable,
                          fmt::format("the cache folder {} cannot be used: {}; nothing was compiled. Pass a writable "
                                      "--cache-dir DIR (or set MOEJIT_CACHE_DIR)",
                                      folder, why)};
    }
    int workers = std::max(1, args.jobs ? args.jobs : usable_cores());
    reporter.out(fmt::format("{} {} plan variants of {} layer shape{} for {} with {} worker{} into {}",
                             run.check ? "checking" : "warming", jobs.size(), args.specs.size(),
                             args.specs.size() == 1 ? "" : "s", run.arch, workers, workers == 1 ? "" : "s",
                             folder.empty() ? "(memory only)" : folder));
    RunOptions r = run;
    r.jobs = workers;
    auto start = std::chrono::steady_clock::now();
    RunTotals t = run_jobs(jobs, r, reporter);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    std::size_t missing = 0, compile_failed = 0, other_failed = 0;
    for (const JobResult &f : t.failures) {
        if (f.status == MOEJIT_ERROR_JIT_DISABLED) ++missing;
        else if (f.status == MOEJIT_ERROR_COMPILE) ++compile_failed;
        else ++other_failed;
    }
    if (missing) {
        if (folder.empty())
            fmt::print(stderr, "missing: there is no usable disk cache (see the warning above), so it covers none "
                               "of these plan variants:\n");
        else
            fmt::print(stderr, "missing: the cache {} does not cover these plan variants:\n", folder);
        for (const JobResult &f : t.failures)
            if (f.status == MOEJIT_ERROR_JIT_DISABLED) fmt::print(stderr, "  {}: {}\n", f.label, f.message);
    }
    if (compile_failed + other_failed) {
        fmt::print(stderr, "failed plan variants (errors above):\n");
        for (const JobResult &f : t.failures)
            if (f.status != MOEJIT_ERROR_JIT_DISABLED)
                fmt::print(stderr, "  {}: {}\n", f.label, moejit_status_string(f.status));
    }
    // Every kernel compiled must now be on disk: a fresh JIT-off context reads each plan
    // variant back (disk hits only). A store that failed (disk full, unwritable) shows here.
    std::size_t not_stored = 0;
    if (!run.check && t.failures.empty()) {
        not_stored = count_not_stored(jobs, run);
        if (not_stored)
            fmt::print(stderr, "not stored: {} of {} plan variants are not covered by {} after the warmup: kernels "
                               "compiled but could not be stored (see the warnings above: disk full? unwritable?)\n",
                       not_stored, jobs.size(), folder);
    }
    std::fflush(stderr);
    FolderScan scan = scan_cache_folder(folder);
    fmt::print("summary: kernels: {}  compiled: {}  hits: {}  rejected: {}  failures: {}  missing: {}  wall: {:.2f} s\n",
               t.memory_hits + t.disk_hits + t.misses, t.compiled, t.memory_hits + t.disk_hits, t.rejected, compile_failed + other_failed, missing,
               wall);
    fmt::print("details: {} plan variants, {} worker(s), NVRTC {:.2f} s in total, {} disk hits, {} memory hits, "
               "{} kernel compile failures\n",
               jobs.size(), workers, t.compile_seconds, t.disk_hits, t.memory_hits, t.compile_failures);
    fmt::print("cache: {}  entries: {}  size: {} bytes ({})\n", folder.empty() ? "(memory only)" : folder,
               scan.entries, scan.entry_bytes, human_bytes(scan.entry_bytes));
    if (other_failed) return exit_other;
    if (compile_failed) return exit_compile_failures;
    if (missing) return exit_missing;
    if (not_stored) return exit_not_stored;
    return exit_ok;
}

int run_main(int argc, char **argv) {
    Args args = parse_args(argc, argv);
    if (args.help) {
        std::fputs(kHelp, stdout);
        return exit_ok;
    }
    if (args.version) {
        fmt::print("moejit-warmup with moejit {}, NVRTC {}\n", moejit_version(), nvrtc_version_text());
        return exit_ok;
    }
    if (args.list) {
        print_presets();
        return exit_ok;
    }
    Reporter reporter(::isatty(STDOUT_FILENO) == 1, args.verbose, args.check);
    RunOptions run = args.run;
    run.cache_dir = args.cache_dir;
    run.check = args.check;
    // --info and --clear only locate the folder, which does not depend on the arch.
    if (args.arch) run.arch = *args.arch;
    else run.arch = args.specs.empty() ? "sm_90a" : device_arch();
    ContextPtr probe = probe_context(run, reporter);
    std::string folder = cache_folder_of(probe.get());
    probe.reset();

    int code = exit_ok;
    if (args.clear) clear(folder);
    if (!args.specs.empty()) code = warm(args, run, reporter, folder);
    if (args.info) print_info(folder);
    return code;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        return run_main(argc, argv);
    } catch (const UsageError &e) {
        std::fflush(stdout);
        fmt::print(stderr, "moejit-warmup: error: {}\n", e.what());
        return exit_usage;
    } catch (const Failure &f) {
        std::fflush(stdout);
        fmt::print(stderr, "moejit-warmup: error: {}\n", f.message);
        return f.code;
    } catch (const std::exception &e) {
        std::fflush(stdout);
        fmt::print(stderr, "moejit-warmup: error: {}\n", e.what());
        return exit_other;
    }
}
