// The disk cache's trust boundary (issue 16 item 1), without a GPU: which folders are used,
// how entries are opened, what a read may change, what the key covers, and the tuning store's
// writes. Uses only JitEngine / TuningStore interfaces that 0.3.0 already had, so the same file
// built against 0.3.0 shows each finding (the report says which cases failed there).
#define BOOST_TEST_MODULE cache_trust
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "compile_only.hpp"
#include "jit_test_kernels.hpp"
#include "print_enums.hpp"
#include "base/error.hpp"
#include "gemm/tuning.hpp"
#include "runtime/jit_engine.hpp"
#include "base/sha256.hpp"

namespace fs = std::filesystem;
using namespace moejit;
using moejit::test::TempDir;

namespace {

using moejit::test::LogCapture;

KernelSource tiny_kernel(int variant = 0) { return moejit::test::tiny_kernel(variant, "trust_axpy"); }

using moejit::test::compile_only_jit_options;

// tmp/name, created with mode 0700 (a cache folder only its owner can write).
std::string private_folder(const TempDir &tmp, const char *name) {
    const std::string folder = (tmp.path() / name).string();
    fs::create_directories(folder);
    ::chmod(folder.c_str(), 0700);
    return folder;
}

// A private cache folder tmp/v with its private tuning/ subfolder.
fs::path private_tuning_folder(const TempDir &tmp) {
    const fs::path folder = private_folder(tmp, "v");
    fs::create_directories(folder / "tuning");
    ::chmod((folder / "tuning").c_str(), 0700);
    return folder;
}

std::string entry_path(const std::string &dir, const KernelSource &s) {
    JitEngine engine(compile_only_jit_options(""));
    return dir + "/" + s.name + "." + to_hex(engine.key(s)) + ".cubin";
}

std::string read_all(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const fs::path &p, const std::string &bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

unsigned mode_of(const fs::path &p) {
    struct stat st;
    BOOST_REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

std::size_t cubin_files(const fs::path &dir) {
    std::size_t n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".cubin") ++n;
    return n;
}

// Runs `body` in a child process that is killed after `seconds`: a hang fails the test instead
// of the whole run. The child's exit status 0 means `body` returned true.
bool in_child_with_timeout(int seconds, const std::function<bool()> &body) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
        ::alarm(static_cast<unsigned>(seconds));
        bool ok = false;
        try {
            ok = body();
        } catch (const std::exception &e) {
            std::fprintf(stderr, "child: exception: %s\n", e.what());
        }
        std::fflush(nullptr);
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        BOOST_TEST_MESSAGE("child killed by signal " << WTERMSIG(status) << " (a hang when SIGALRM)");
        return false;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A valid entry for `tiny_kernel()` whose payload was replaced by `payload`, with the header's
// size and checksum recomputed: what anyone able to write the folder can produce.
std::string forged_entry(const std::string &genuine, const std::string &payload) {
    constexpr std::size_t header = 8 + 4 + 4 + 32 + 8 + 32;
    std::string out = genuine.substr(0, header) + payload;
    for (int i = 0; i < 8; ++i) out[48 + i] = char(std::uint64_t(payload.size()) >> (8 * i));
    Digest sum = sha256(payload);
    std::copy(sum.begin(), sum.end(), out.begin() + 56);
    return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(created_cache_folders_are_0700) {
    TempDir tmp;
    const fs::path root = tmp.path() / "root", folder = root / "v";
    JitEngine engine(compile_only_jit_options(folder.string()));
    engine.get(tiny_kernel());
    BOOST_TEST(engine.counters().compiles == 1u);
    BOOST_TEST(cubin_files(folder) == 1u);
    BOOST_TEST(mode_of(root) == 0700u);
    BOOST_TEST(mode_of(folder) == 0700u);
}

namespace {
// `prepare` makes the temp root and its version folder untrustworthy; the engine must use neither what is there nor
// write anything, and say so once.
void expect_refused(const std::function<void(const fs::path &root, const fs::path &folder)> &prepare) {
    TempDir tmp;
    const fs::path root = tmp.path() / "root", folder = root / "v";
    fs::create_directories(folder);
    ::chmod(root.c_str(), 0700);
    ::chmod(folder.c_str(), 0700);
    // A genuine entry first (so "used" would show as a disk hit).
    { JitEngine(compile_only_jit_options(folder.string())).get(tiny_kernel()); }
    BOOST_REQUIRE(cubin_files(folder) == 1u);
    prepare(root, folder);
    LogCapture log;
    JitEngine engine(compile_only_jit_options(folder.string(), log.logger()));
    engine.get(tiny_kernel());
    engine.get(tiny_kernel(1));
    BOOST_TEST(engine.counters().disk_hits == 0u);  // not read
    BOOST_TEST(engine.counters().compiles == 2u);
    BOOST_TEST(cubin_files(folder) == 1u);  // not written
    BOOST_TEST(engine.cache_dir().empty());
    BOOST_TEST(log.warnings.size() == 1u);
    if (!log.warnings.empty()) BOOST_TEST(log.warnings[0].find("nobody else can write") != std::string::npos, log.warnings[0]);
    // A second context on the same folder in this process does not repeat the warning.
    LogCapture again;
    JitEngine(compile_only_jit_options(folder.string(), again.logger())).get(tiny_kernel());
    BOOST_TEST(again.warnings.empty());
    ::chown(folder.c_str(), 0, 0);  // let TempDir clean up
}
}  // namespace

BOOST_AUTO_TEST_CASE(group_writable_folder_is_refused) {
    expect_refused([](const fs::path &, const fs::path &folder) { ::chmod(folder.c_str(), 0770); });
}
BOOST_AUTO_TEST_CASE(world_writable_folder_is_refused) {
    expect_refused([](const fs::path &, const fs::path &folder) { ::chmod(folder.c_str(), 0707); });
}
BOOST_AUTO_TEST_CASE(folder_owned_by_another_user_is_refused) {
    expect_refused([](const fs::path &, const fs::path &folder) { BOOST_REQUIRE(::chown(folder.c_str(), 65534, 65534) == 0); });
}
BOOST_AUTO_TEST_CASE(root_precreated_world_writable_by_another_user_is_refused) {
    expect_refused([](const fs::path &root, const fs::path &) {
        BOOST_REQUIRE(::chown(root.c_str(), 65534, 65534) == 0);
        ::chmod(root.c_str(), 0777);
    });
}

BOOST_AUTO_TEST_CASE(sticky_world_writable_root_like_tmp_is_accepted) {
    TempDir tmp;
    const fs::path root = tmp.path() / "root", folder = root / "v";
    fs::create_directories(root);
    ::chmod(root.c_str(), 01777);
    { JitEngine(compile_only_jit_options(folder.string())).get(tiny_kernel()); }
    JitEngine engine(compile_only_jit_options(folder.string()));
    engine.get(tiny_kernel());
    BOOST_TEST(engine.counters().disk_hits == 1u);
}

BOOST_AUTO_TEST_CASE(forged_entry_is_served_only_from_a_folder_only_its_owner_can_write) {
    TempDir tmp;
    const fs::path folder = tmp.path() / "v";
    { JitEngine(compile_only_jit_options(folder.string())).get(tiny_kernel()); }
    const std::string path = entry_path(folder.string(), tiny_kernel());
    write_all(path, forged_entry(read_all(path), "arbitrary code, correctly checksummed"));
    // Group-writable: anyone in the group could have written it. Refused, never loaded.
    ::chmod(folder.c_str(), 0770);
    {
        JitEngine engine(compile_only_jit_options(folder.string()));
        engine.get(tiny_kernel());
        BOOST_TEST(engine.counters().disk_hits == 0u);
        BOOST_TEST(engine.counters().compiles == 1u);
    }
    // 0700: only the owner could have written it, which is the boundary (documented): served.
    ::chmod(folder.c_str(), 0700);
    JitEngine engine(compile_only_jit_options(folder.string()));
    engine.get(tiny_kernel());
    BOOST_TEST(engine.counters().disk_hits == 1u);
}

BOOST_AUTO_TEST_CASE(fifo_entry_is_a_miss_not_a_hang) {
    TempDir tmp;
    const std::string folder = private_folder(tmp, "v");
    const std::string path = entry_path(folder, tiny_kernel());
    BOOST_REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    BOOST_TEST(in_child_with_timeout(60, [&] {
        JitEngine engine(compile_only_jit_options(folder));
        engine.get(tiny_kernel());
        return engine.counters().compiles == 1u && engine.counters().disk_hits == 0u;
    }));
    // The publish replaced the FIFO with a valid entry.
    struct stat st;
    BOOST_TEST((::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)));
}

BOOST_AUTO_TEST_CASE(symlink_entry_is_not_followed) {
    TempDir tmp;
    const std::string elsewhere = (tmp.path() / "elsewhere").string();
    { JitEngine(compile_only_jit_options(elsewhere)).get(tiny_kernel()); }  // a valid entry, outside the folder
    const std::string folder = private_folder(tmp, "v");
    const std::string target = entry_path(elsewhere, tiny_kernel()), link = entry_path(folder, tiny_kernel());
    const std::string target_bytes = read_all(target);
    fs::create_symlink(target, link);
    JitEngine engine(compile_only_jit_options(folder));
    engine.get(tiny_kernel());
    BOOST_TEST(engine.counters().disk_hits == 0u);
    BOOST_TEST(engine.counters().compiles == 1u);
    // The publish replaced the link itself; the file it pointed to is untouched.
    BOOST_TEST(!fs::is_symlink(link));
    BOOST_TEST(read_all(target) == target_bytes);
}

BOOST_AUTO_TEST_CASE(sparse_one_tib_entry_is_a_miss_not_out_of_memory) {
    TempDir tmp;
    const std::string folder = private_folder(tmp, "v");
    const std::string path = entry_path(folder, tiny_kernel());
    { std::ofstream(path) << ""; }
    std::error_code ec;
    fs::resize_file(path, std::uintmax_t(1) << 40, ec);  // sparse: no blocks allocated
    if (ec) {
        BOOST_TEST_MESSAGE("this file system cannot hold a 1 TiB sparse file (" << ec.message() << "); skipped");
        return;
    }
    BOOST_TEST(in_child_with_timeout(120, [&] {
        JitEngine engine(compile_only_jit_options(folder));
        engine.get(tiny_kernel());  // 0.3.0: std::bad_alloc (OUT_OF_MEMORY for every plan)
        return engine.counters().compiles == 1u;
    }));
}

BOOST_AUTO_TEST_CASE(reading_changes_nothing_on_disk) {
    TempDir tmp;
    const std::string folder = (tmp.path() / "v").string();
    { JitEngine(compile_only_jit_options(folder)).get(tiny_kernel()); }
    const std::string path = entry_path(folder, tiny_kernel());
    std::string damaged = read_all(path);
    damaged[damaged.size() - 100] ^= 0x01;
    write_all(path, damaged);
    // JIT off (moejit-warmup --check, MOEJIT_COMPILE=off): the bad entry is a miss, left as is.
    JitEngine off(compile_only_jit_options(folder, {}, /*jit=*/false));
    try {
        off.get(tiny_kernel());
        BOOST_FAIL("expected MOEJIT_ERROR_JIT_DISABLED");
    } catch (const Error &e) {
        BOOST_TEST(e.status() == Status::jit_disabled);
    }
    BOOST_TEST(off.counters().disk_rejects == 1u);
    BOOST_TEST(fs::exists(path));
    BOOST_TEST(read_all(path) == damaged);
    // A JIT-off context on a folder that does not exist does not create it.
    const fs::path missing = tmp.path() / "missing" / "v";
    JitEngine none(compile_only_jit_options(missing.string(), {}, false));
    BOOST_CHECK_THROW(none.get(tiny_kernel()), Error);
    BOOST_TEST(!fs::exists(tmp.path() / "missing"));
    // With JIT on, the rebuilt entry replaces the bad one.
    JitEngine on(compile_only_jit_options(folder));
    on.get(tiny_kernel());
    JitEngine again(compile_only_jit_options(folder));
    again.get(tiny_kernel());
    BOOST_TEST(again.counters().disk_hits == 1u);
}

// Prints the key of tiny_kernel() when MOEJIT_TEST_PRINT_KEY is set (run in a child process
// by key_covers_the_cuda_headers: the header digest is computed once per process).
BOOST_AUTO_TEST_CASE(print_key_for_environment) {
    if (!std::getenv("MOEJIT_TEST_PRINT_KEY")) return;
    std::printf("KEY %s\n", to_hex(JitEngine(compile_only_jit_options("")).key(tiny_kernel())).c_str());
}

namespace {
std::string key_in_child(const std::string &cuda_home) {
    std::string cmd = "env MOEJIT_TEST_PRINT_KEY=1 CUDA_PATH= CUDA_HOME='" + cuda_home +
                      "' /proc/" + std::to_string(::getpid()) + "/exe --run_test=print_key_for_environment 2>/dev/null";
    FILE *p = ::popen(cmd.c_str(), "r");
    BOOST_REQUIRE(p);
    char line[256];
    std::string key;
    while (std::fgets(line, sizeof line, p))
        if (std::string(line).rfind("KEY ", 0) == 0) key = std::string(line + 4, 64);
    ::pclose(p);
    return key;
}
}  // namespace

BOOST_AUTO_TEST_CASE(key_covers_the_cuda_headers) {
    const std::string real = "/usr/local/cuda";
    if (!fs::exists(real + "/include/cuda_fp16.hpp")) {
        BOOST_TEST_MESSAGE("no toolkit at " << real << "; skipped");
        return;
    }
    // A toolkit that differs from the real one in one header only (everything else linked).
    TempDir tmp;
    const fs::path include = tmp.path() / "cuda" / "include";
    fs::create_directories(include);
    for (const auto &e : fs::directory_iterator(real + "/include"))
        if (e.path().filename() != "cuda_fp16.hpp") fs::create_symlink(e.path(), include / e.path().filename());
    write_all(include / "cuda_fp16.hpp", read_all(real + "/include/cuda_fp16.hpp") + "\n// changed\n");
    const std::string same1 = key_in_child(real), same2 = key_in_child(real);
    const std::string changed = key_in_child((tmp.path() / "cuda").string());
    BOOST_TEST(same1.size() == 64u);
    BOOST_TEST(same1 == same2);  // stable
    BOOST_TEST(changed.size() == 64u);
    BOOST_TEST(changed != same1);
}

BOOST_AUTO_TEST_CASE(tuning_store_write_does_not_follow_a_planted_temp_name) {
    TempDir tmp;
    const fs::path folder = private_tuning_folder(tmp);
    const fs::path victim = tmp.path() / "victim.txt";
    write_all(victim, "precious\n");
    TuningStore store(folder.string());
    const std::string key = "k";
    const std::string path = store.path_for(key);
    // 0.3.0 wrote "<file>.tmp.<pid>.<this>" with O_TRUNC and no O_EXCL: plant every such name.
    const std::string predictable =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(reinterpret_cast<std::uintptr_t>(&store));
    fs::create_symlink(victim, predictable);
    GemmTileConfig tile;
    store.save(key, tile);
    BOOST_TEST(read_all(victim) == "precious\n");
    TuningStore fresh(folder.string());
    BOOST_TEST(fresh.find(key).has_value());
}

BOOST_AUTO_TEST_CASE(tuning_file_that_is_a_fifo_is_ignored_not_a_hang) {
    TempDir tmp;
    const fs::path folder = private_tuning_folder(tmp);
    TuningStore probe(folder.string());
    BOOST_REQUIRE(::mkfifo(probe.path_for("k").c_str(), 0600) == 0);
    BOOST_TEST(in_child_with_timeout(30, [&] {
        TuningStore store(folder.string());
        return !store.find("k").has_value();
    }));
}
