// The disk cache under load and faults (issue 29 item 6), without a GPU:
//  - two processes warming the same kernels into one folder at the same moment leave no corrupt
//    entry, no temp file and no lost compile (every entry validates; a JIT-off context finds
//    every kernel of the set);
//  - a folder that turns read-only, or a disk that fills up, during a run: every kernel still
//    compiles and stays in the memory cache (asked again, it is a memory hit), the layer's plan
//    still warms, and each context says so in ONE warning naming the folder and the reason.
// The faults are real, not simulated: a tmpfs remounted read-only and a tmpfs filled to the
// last byte in a private mount namespace (root with CAP_SYS_ADMIN, as in the dev containers);
// elsewhere chmod 0500 (not as root: root ignores permission bits) and a file size limit
// (RLIMIT_FSIZE: writes fail with EFBIG as they would with ENOSPC). A case none of them can
// fault is reported as skipped, never passed silently.
#define BOOST_TEST_MODULE cache_robustness
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compile_only.hpp"
#include "jit_test_kernels.hpp"
#include "layer_args.h"
#include "base/error.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/jit_engine.hpp"

namespace fs = std::filesystem;
using namespace moejit;
using moejit::test::TempDir;

namespace {

constexpr int kSkipped = 77;

KernelSource kernel(int variant) { return moejit::test::tiny_kernel(variant, "robust_axpy"); }

// Checks inside a forked child (Boost.Test's record of failures stays in the child): each
// failure is printed, and the child's exit status says whether any happened.
struct ChildChecks {
    int failures = 0;
    void expect(bool ok, const std::string &what) {
        if (!ok) {
            ++failures;
            std::fprintf(stderr, "child %d: FAILED: %s\n", static_cast<int>(::getpid()), what.c_str());
        }
    }
};

// Runs `body` in a child killed after `seconds`; returns its exit status (0 pass, 77 skipped,
// else failed; a signal counts as failed).
int in_child(int seconds, const std::function<int()> &body) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
        ::alarm(static_cast<unsigned>(seconds));
        int code = 1;
        try {
            code = body();
        } catch (const std::exception &e) {
            std::fprintf(stderr, "child: exception: %s\n", e.what());
        }
        std::fflush(nullptr);
        ::_exit(code);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(status)) {
        BOOST_TEST_MESSAGE("child killed by signal " << WTERMSIG(status) << " (SIGALRM: it hung)");
        return 128 + WTERMSIG(status);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

void expect_child_passed(int code, const char *what) {
    if (code == kSkipped) {
        std::printf("SKIPPED %s: this machine offers no way to make a folder read-only or full for this user "
                    "(no mount namespace, and running as root makes chmod ineffective)\n",
                    what);
        BOOST_WARN_MESSAGE(false, std::string(what) + " skipped");
        return;
    }
    BOOST_TEST(code == 0, what << ": the child exited with " << code << " (its messages are above)");
}

std::vector<fs::path> files_with(const fs::path &dir, const std::string &needle) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().filename().string().find(needle) != std::string::npos) out.push_back(it->path());
    return out;
}

bool parse_hex_key(const std::string &hex, Digest &key) {
    if (hex.size() != 64) return false;
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < 32; ++i) {
        const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        key[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return true;
}

// Warnings (and errors) a context or an engine logged.
struct Warnings {
    std::vector<std::string> lines;
    static void c_callback(moejit_log_level_t level, const char *msg, void *user) {
        if (level >= MOEJIT_LOG_WARNING) static_cast<Warnings *>(user)->lines.emplace_back(msg);
    }
    static void callback(LogLevel level, const char *msg, void *user) {
        if (level >= LogLevel::warning) static_cast<Warnings *>(user)->lines.emplace_back(msg);
    }
    Logger logger() { return Logger{&Warnings::callback, this}; }
    std::string all() const {
        std::string s;
        for (const std::string &l : lines) s += "\n    " + l;
        return s;
    }
};

using moejit::test::compile_only_jit_options;

// A compile-only context over the cache root `root` (entries go to root/<version>).
moejit_context_t compile_only_context(const std::string &root, Warnings *warnings, bool jit = true) {
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = root.c_str();
    o.jit_mode = jit ? MOEJIT_JIT_ON : MOEJIT_JIT_OFF;
    if (warnings) {
        o.log_fn = &Warnings::c_callback;
        o.log_user_data = warnings;
    }
    moejit_context_t ctx = nullptr;
    if (moejit_context_create(&o, &ctx) != MOEJIT_SUCCESS)
        throw std::runtime_error(std::string("compile-only context: ") + moejit_last_error());
    return ctx;
}

moejit_cache_stats_t stats_of(moejit_context_t ctx) {
    moejit_cache_stats_t s;
    moejit_cache_stats_init(&s);
    if (moejit_context_cache_stats(ctx, &s) != MOEJIT_SUCCESS) throw std::runtime_error(moejit_last_error());
    return s;
}

// A small layer (qwen3-like proportions, tiny sizes): what a plan warms, 21 kernels on sm_90a.
moejit_plan_desc_t small_layer(bool merged) {
    moejit_plan_desc_t d;
    layer_desc_init(&d, 512, 256, 8, 2);
    d.fc1_layout = merged ? MOEJIT_FC1_MERGED : MOEJIT_FC1_SPLIT;
    return d;
}

constexpr int kTinyKernels = 16;

}  // namespace

BOOST_AUTO_TEST_CASE(two_processes_warm_the_same_kernels_into_one_folder) {
    TempDir tmp("moejit-race");
    const std::string root = (tmp.path() / "root").string();
    const std::string engine_folder = (tmp.path() / "engine" / "v").string();
    // Both children block on the pipe until the parent releases them together.
    int go[2];
    BOOST_REQUIRE(::pipe(go) == 0);
    auto warm = [&](int which) {
        return [&, which]() -> int {
            ::close(go[1]);
            char byte;
            if (::read(go[0], &byte, 1) != 1) return 1;
            ChildChecks checks;
            Warnings warnings;
            moejit_context_t ctx = compile_only_context(root, &warnings);
            for (bool merged : {false, true}) {
                const moejit_plan_desc_t d = small_layer(merged);
                int kernels = 0;
                const moejit_status_t st = moejit_plan_warmup(ctx, &d, &kernels);
                checks.expect(st == MOEJIT_SUCCESS, std::string("plan warmup: ") + moejit_last_error());
            }
            const moejit_cache_stats_t s = stats_of(ctx);
            checks.expect(s.disk_rejects == 0, "a racing warmup read an entry that did not validate");
            moejit_context_destroy(ctx);
            // The same tiny kernels in the same order from both: the same keys published at once.
            Warnings engine_warnings;
            JitEngine engine(compile_only_jit_options(engine_folder, engine_warnings.logger()));
            for (int v = 0; v < kTinyKernels; ++v) engine.get(kernel(v));
            checks.expect(engine.counters().disk_rejects == 0, "the engine read an entry that did not validate");
            checks.expect(warnings.lines.empty() && engine_warnings.lines.empty(),
                          "warnings while racing:" + warnings.all() + engine_warnings.all());
            std::printf("child %d: plan kernels compiled %llu, found on disk %llu; tiny kernels compiled %llu, "
                        "found on disk %llu\n",
                        which, static_cast<unsigned long long>(s.compiles),
                        static_cast<unsigned long long>(s.disk_hits),
                        static_cast<unsigned long long>(engine.counters().compiles),
                        static_cast<unsigned long long>(engine.counters().disk_hits));
            return checks.failures ? 1 : 0;
        };
    };
    std::fflush(nullptr);
    std::vector<pid_t> children;
    for (int which = 0; which < 2; ++which) {
        const pid_t pid = ::fork();
        BOOST_REQUIRE(pid >= 0);
        if (pid == 0) {
            ::alarm(600);
            int code = 1;
            try {
                code = warm(which)();
            } catch (const std::exception &e) {
                std::fprintf(stderr, "child %d: exception: %s\n", which, e.what());
            }
            std::fflush(nullptr);
            ::_exit(code);
        }
        children.push_back(pid);
    }
    ::close(go[0]);
    BOOST_REQUIRE(::write(go[1], "gg", 2) == 2);
    ::close(go[1]);
    for (pid_t pid : children) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0), "a racing warmup failed (status " << status << ")");
    }

    // No corrupt entry: every file the race left is a complete, valid entry; no temp file.
    Warnings warnings;
    moejit_context_t check = compile_only_context(root, &warnings, /*jit=*/false);
    const char *folder_c = nullptr;
    BOOST_REQUIRE(moejit_context_cache_dir(check, &folder_c) == MOEJIT_SUCCESS);
    const std::string folder = folder_c;
    for (const std::string &dir : {folder, engine_folder}) {
        BOOST_TEST(files_with(dir, ".tmp.").empty(), "temp files left in " << dir);
        DiskCache cache(dir, warnings.logger());
        const std::vector<fs::path> entries = files_with(dir, ".cubin");
        BOOST_TEST(!entries.empty());
        for (const fs::path &p : entries) {
            const std::string stem = p.stem().string();  // <name>.<64 hex>
            const std::size_t dot = stem.rfind('.');
            Digest key{};
            BOOST_TEST_REQUIRE((dot != std::string::npos && parse_hex_key(stem.substr(dot + 1), key)),
                               "not an entry name: " << p);
            CachedKernel entry;
            BOOST_TEST((cache.load(stem.substr(0, dot), key, entry) == DiskCache::Lookup::hit),
                       "entry " << p << " does not validate");
            BOOST_TEST(!entry.cubin.empty());
        }
    }
    // No lost compile: a JIT-off context finds the whole set on disk, and nothing else is there.
    int plan_kernels = 0;
    for (bool merged : {false, true}) {
        const moejit_plan_desc_t d = small_layer(merged);
        int kernels = 0;
        BOOST_TEST(moejit_plan_warmup(check, &d, &kernels) == MOEJIT_SUCCESS,
                   "a kernel of the " << (merged ? "merged" : "split") << " plan is missing: " << moejit_last_error());
        plan_kernels += kernels;
    }
    const moejit_cache_stats_t s = stats_of(check);
    BOOST_TEST(s.compiles == 0u);
    BOOST_TEST(s.misses == 0u);
    BOOST_TEST(s.disk_rejects == 0u);
    BOOST_TEST(s.disk_hits == files_with(folder, ".cubin").size(), "entries on disk that no plan asked for");
    BOOST_TEST(s.disk_hits + s.memory_hits >= static_cast<std::uint64_t>(plan_kernels));
    moejit_context_destroy(check);
    JitEngine engine(compile_only_jit_options(engine_folder, warnings.logger(), /*jit=*/false));
    for (int v = 0; v < kTinyKernels; ++v) BOOST_CHECK_NO_THROW(engine.get(kernel(v)));
    BOOST_TEST(engine.counters().disk_hits == static_cast<std::uint64_t>(kTinyKernels));
    BOOST_TEST(files_with(engine_folder, ".cubin").size() == static_cast<std::size_t>(kTinyKernels));
    BOOST_TEST(warnings.lines.empty(), "warnings:" << warnings.all());
}

namespace {

// A private mount namespace for this (child) process, so mounts made now vanish with it and
// nobody else sees them. False when the process may not (no CAP_SYS_ADMIN).
bool private_mounts() {
    if (::unshare(CLONE_NEWNS) != 0) return false;
    return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

bool mount_tmpfs(const fs::path &at, const char *size) {
    fs::create_directories(at);
    const std::string data = std::string("size=") + size + ",mode=0700";
    return ::mount("tmpfs", at.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) == 0;
}

// What one faulty-folder case checks, in a fresh engine and a fresh C context on the faulty
// cache: every kernel compiles and stays in memory, nothing is added to the folder, and one
// warning per context names the folder and `reason`.
void check_runs_in_memory(ChildChecks &checks, const std::string &engine_folder, const std::string &context_root,
                          const std::vector<std::string> &reasons, int first_new, int stored_before) {
    auto names_reason = [&](const std::string &line) {
        for (const std::string &r : reasons)
            if (line.find(r) != std::string::npos) return true;
        return false;
    };
    for (int round = 0; round < 2; ++round) {  // two contexts: each says it once
        Warnings warnings;
        JitEngine engine(compile_only_jit_options(engine_folder, warnings.logger()));
        for (int v = 0; v < first_new; ++v) engine.get(kernel(v));  // stored before the fault
        checks.expect(engine.counters().disk_hits == static_cast<std::uint64_t>(first_new),
                      "the entries stored before the fault are not served");
        for (int v = first_new; v < kTinyKernels; ++v) engine.get(kernel(v));
        const CacheCounters after_compile = engine.counters();
        checks.expect(after_compile.compiles == static_cast<std::uint64_t>(kTinyKernels - first_new),
                      "not every new kernel was compiled");
        for (int v = 0; v < kTinyKernels; ++v) engine.get(kernel(v));
        const CacheCounters again = engine.counters();
        checks.expect(again.compiles == after_compile.compiles && again.disk_hits == after_compile.disk_hits &&
                          again.memory_hits == after_compile.memory_hits + kTinyKernels,
                      "compiled kernels are not kept in the memory cache");
        checks.expect(warnings.lines.size() == 1, "expected one warning from this context, got " +
                                                      std::to_string(warnings.lines.size()) + ":" + warnings.all());
        if (!warnings.lines.empty()) {
            const std::string &w = warnings.lines.front();
            std::printf("child: round %d warning: %s\n", round, w.c_str());
            checks.expect(w.find(engine_folder) != std::string::npos, "the warning does not name the folder: " + w);
            checks.expect(names_reason(w), "the warning does not say why: " + w);
            checks.expect(w.find("in memory") != std::string::npos, "the warning does not say where kernels go: " + w);
        }
        checks.expect(files_with(engine_folder, ".cubin").size() == static_cast<std::size_t>(stored_before),
                      "the folder's entries changed");
        checks.expect(files_with(engine_folder, ".tmp.").empty(), "a failed publish left a temp file");
    }
    // The layer: a plan still warms (compiles in memory) on a context over the faulty cache, and
    // that context also says it once.
    Warnings warnings;
    moejit_context_t ctx = compile_only_context(context_root, &warnings);
    const moejit_plan_desc_t d = small_layer(false);
    int kernels = 0;
    checks.expect(moejit_plan_warmup(ctx, &d, &kernels) == MOEJIT_SUCCESS,
                  std::string("the plan does not warm: ") + moejit_last_error());
    checks.expect(moejit_plan_warmup(ctx, &d, &kernels) == MOEJIT_SUCCESS, "the plan does not warm twice");
    const moejit_cache_stats_t s = stats_of(ctx);
    checks.expect(s.compiles > 0 && s.memory_hits >= static_cast<std::uint64_t>(kernels),
                  "the plan's kernels are not kept in memory (compiles " + std::to_string(s.compiles) +
                      ", memory hits " + std::to_string(s.memory_hits) + ")");
    checks.expect(warnings.lines.size() == 1, "expected one warning from the plan's context, got " +
                                                  std::to_string(warnings.lines.size()) + ":" + warnings.all());
    if (!warnings.lines.empty()) checks.expect(names_reason(warnings.lines.front()), "the plan's warning does not say why");
    moejit_context_destroy(ctx);
}

// Stores kernels [0, count) into `engine_folder` and creates `context_root`'s versioned folder
// (an entry of one plan-free kernel through a C context), before the fault.
void store_before_fault(ChildChecks &checks, const std::string &engine_folder, const std::string &context_root,
                        int count) {
    Warnings warnings;
    {
        JitEngine engine(compile_only_jit_options(engine_folder, warnings.logger()));
        for (int v = 0; v < count; ++v) engine.get(kernel(v));
    }
    moejit_context_t ctx = compile_only_context(context_root, &warnings);
    const moejit_plan_desc_t d = small_layer(true);  // another plan: its entries leave the split one to compile
    checks.expect(moejit_plan_warmup(ctx, &d, nullptr) == MOEJIT_SUCCESS, moejit_last_error());
    moejit_context_destroy(ctx);
    checks.expect(warnings.lines.empty(), "warnings before the fault:" + warnings.all());
    checks.expect(files_with(engine_folder, ".cubin").size() == static_cast<std::size_t>(count),
                  "entries not stored before the fault");
}

}  // namespace

namespace {

// Breaks the cache under `base` (mounted: a private tmpfs there) in a test's own way: sets the
// error texts the warnings must name; returns an exit code to stop the child with, or nullopt.
using CacheFault = std::function<std::optional<int>(const fs::path &base, bool mounted,
                                                    const std::string &engine_folder,
                                                    std::vector<std::string> &reasons)>;

// The child both fault tests run: a cache under base (a tmpfs of `tmpfs_size` where this process
// may mount one) stores kStored entries, `fault` breaks it, then runs compile in memory and say
// so once. skip_root_without_mount: without a mount, root bypasses the fault (chmod).
int cache_fault_child(const fs::path &base, const char *tmpfs_size, bool skip_root_without_mount,
                      const CacheFault &fault) {
    constexpr int kStored = 4;
    ChildChecks checks;
    const bool mounted = private_mounts() && mount_tmpfs(base, tmpfs_size);
    if (!mounted && skip_root_without_mount && ::geteuid() == 0) return kSkipped;
    fs::create_directories(base);
    const std::string engine_folder = (base / "engine" / "v").string();
    const std::string context_root = (base / "root").string();
    store_before_fault(checks, engine_folder, context_root, kStored);
    std::vector<std::string> reasons;
    if (const std::optional<int> stop = fault(base, mounted, engine_folder, reasons)) return *stop;
    check_runs_in_memory(checks, engine_folder, context_root, reasons, kStored, kStored);
    return checks.failures ? 1 : 0;
}

// Runs cache_fault_child under tmp/mnt in a child process (600 s at most) and checks it passed.
void expect_cache_fault_child_passed(const TempDir &tmp, const char *tmpfs_size,
                                     bool skip_root_without_mount, const CacheFault &fault,
                                     const char *what) {
    const int code = in_child(600, [&]() -> int {
        return cache_fault_child(tmp.path() / "mnt", tmpfs_size, skip_root_without_mount, fault);
    });
    expect_child_passed(code, what);
}

}  // namespace

BOOST_AUTO_TEST_CASE(read_only_cache_during_a_run_compiles_in_memory_and_says_so_once) {
    TempDir tmp("moejit-readonly");
    const CacheFault remount_read_only = [](const fs::path &base, bool mounted, const std::string &engine_folder,
                                           std::vector<std::string> &reasons) -> std::optional<int> {
        if (mounted) {
            if (::mount(nullptr, base.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0) {
                std::fprintf(stderr, "remounting read-only: %s\n", std::strerror(errno));
                return 1;
            }
            reasons = {std::strerror(EROFS)};
            std::printf("child: the cache is on a tmpfs remounted read-only\n");
        } else {
            for (const fs::path &p : {fs::path(engine_folder), fs::path(base / "root")})
                for (const fs::path &dir : {p, p / fs::path(moejit_version())})
                    if (fs::is_directory(dir)) ::chmod(dir.c_str(), 0500);
            reasons = {std::strerror(EACCES)};
            std::printf("child: the cache folders are chmod 0500\n");
        }
        return std::nullopt;
    };
    expect_cache_fault_child_passed(tmp, "64m", true, remount_read_only, "read-only cache");
}

BOOST_AUTO_TEST_CASE(full_disk_during_a_run_compiles_in_memory_and_says_so_once) {
    TempDir tmp("moejit-full");
    const CacheFault fill_the_disk = [](const fs::path &base, bool mounted, const std::string &,
                                       std::vector<std::string> &reasons) -> std::optional<int> {
        if (mounted) {
            // Fill the file system to its last byte (ENOSPC), as a full disk is.
            const fs::path filler = base / "filler";
            const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
            if (fd < 0) return 1;
            std::vector<char> block(1 << 16, 'x');
            std::size_t chunk = block.size();
            while (chunk > 0) {
                if (::write(fd, block.data(), chunk) < 0) {
                    if (errno != ENOSPC) return 1;
                    chunk /= 2;  // top up the last partial blocks
                }
            }
            ::close(fd);
            reasons = {std::strerror(ENOSPC)};
            std::printf("child: the cache is on a full tmpfs\n");
        } else {
            // Writes past 512 bytes fail with EFBIG (SIGXFSZ ignored), as on a full disk.
            ::signal(SIGXFSZ, SIG_IGN);
            const rlimit limit{512, 512};
            if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return kSkipped;
            reasons = {std::strerror(EFBIG)};
            std::printf("child: writes are limited to 512 bytes (RLIMIT_FSIZE)\n");
        }
        return std::nullopt;
    };
    expect_cache_fault_child_passed(tmp, "16m", false, fill_the_disk, "full disk");
}
