// JIT engine on a machine without a GPU: SHA-256, cache keys, NVRTC, the disk cache's
// self-checking entries, atomic publish under process races, degraded (memory-only) caching.
#define BOOST_TEST_MODULE jit
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compile_only.hpp"
#include "jit_test_kernels.hpp"
#include "print_enums.hpp"
#include "runtime/context.hpp"
#include "runtime/cache_paths.hpp"
#include "runtime/cuda_headers.hpp"
#include "runtime/nvrtc_archs.hpp"
#include "runtime/jit_engine.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "base/sha256.hpp"
#include "runtime/templates.hpp"

namespace fs = std::filesystem;
using namespace moejit;

namespace {

using moejit::test::TempDir;

using moejit::test::LogCapture;
using moejit::test::tiny_kernel;

using moejit::test::compile_only_jit_options;

std::vector<fs::path> entries(const fs::path &dir) {
    std::vector<fs::path> out;
    for (auto &e : fs::directory_iterator(dir)) out.push_back(e.path());
    return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sha256_published_vectors) {
    // FIPS 180-4 examples and the empty string.
    BOOST_TEST(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    BOOST_TEST(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    BOOST_TEST(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    std::string million(1000000, 'a');
    BOOST_TEST(to_hex(sha256(million)) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    // Incremental updates in odd pieces give the same digest.
    Sha256 h;
    for (std::size_t i = 0; i < million.size(); i += 997) h.update(std::string_view(million).substr(i, 997));
    BOOST_TEST(to_hex(h.finish()) == to_hex(sha256(million)));
    // Length prefixes keep field boundaries: "ab"+"c" differs from "a"+"bc".
    BOOST_TEST(to_hex(Sha256().field("ab").field("c").finish()) != to_hex(Sha256().field("a").field("bc").finish()));
}

BOOST_AUTO_TEST_CASE(templates_are_embedded) {
    BOOST_TEST(find_template("moejit_common.cuh") != nullptr);
    BOOST_TEST(find_template("moejit_common.cuh")->source.find("namespace moejit") != std::string_view::npos);
    auto closure = template_include_closure("#include \"moejit_common.cuh\"\n#include <x.h>\n");
    BOOST_TEST(closure.size() == 1u);
    BOOST_CHECK_THROW(template_include_closure("#include \"missing.cuh\"\n"), Error);
    // Templates in a folder are named by their path; the key hashes every header the kernel
    // reaches through them.
    auto sm90 = template_include_closure("#include \"sm90/group_gemm.cuh\"\n");
    for (std::string_view name : {"sm90/ptx.cuh", "sm90/pipeline.cuh", "sm90/epilogue.cuh", "sm90/split_reduce.cuh",
                                  "swiglu.cuh", "group_gemm_schedule.cuh", "expert_scan.cuh", "moejit_common.cuh"})
        BOOST_TEST((std::find(sm90.begin(), sm90.end(), name) != sm90.end()), name);
}

BOOST_AUTO_TEST_CASE(key_changes_with_every_field) {
    TempDir dir;
    JitEngine engine(compile_only_jit_options(""));
    KernelSource base = tiny_kernel();
    Digest k0 = engine.key(base);
    BOOST_TEST(to_hex(engine.key(base)) == to_hex(k0));  // stable
    KernelSource s = base;
    s.source += " ";
    BOOST_TEST(to_hex(engine.key(s)) != to_hex(k0));
    s = base;
    s.entry = "other";
    BOOST_TEST(to_hex(engine.key(s)) != to_hex(k0));
    s = base;
    s.template_name = "other.cuh";
    BOOST_TEST(to_hex(engine.key(s)) != to_hex(k0));
    JitOptions other_arch = compile_only_jit_options("");
    other_arch.arch = "sm_80";
    BOOST_TEST(to_hex(JitEngine(other_arch).key(base)) != to_hex(k0));
    // The file name is not part of the key (it is readable decoration only).
    s = base;
    s.name = "renamed";
    BOOST_TEST(to_hex(engine.key(s)) == to_hex(k0));
}

BOOST_AUTO_TEST_CASE(compile_error_returns_the_log) {
    JitEngine engine(compile_only_jit_options(""));
    KernelSource bad = tiny_kernel();
    bad.source += "\nthis_is_not_cuda;\n";
    moejit::test::expect_compile_error(engine, bad, "this_is_not_cuda");
    BOOST_TEST(engine.counters().compile_failures == 1u);
}

BOOST_AUTO_TEST_CASE(hits_and_misses_across_fresh_engines) {
    TempDir dir;
    {
        JitEngine engine(compile_only_jit_options(dir.string()));
        engine.get(tiny_kernel(0));
        engine.get(tiny_kernel(1));
        engine.get(tiny_kernel(0));
        CacheCounters c = engine.counters();
        BOOST_TEST(c.compiles == 2u);
        BOOST_TEST(c.misses == 2u);
        BOOST_TEST(c.memory_hits == 1u);
        BOOST_TEST(c.disk_hits == 0u);
    }
    JitEngine engine(compile_only_jit_options(dir.string()));
    engine.get(tiny_kernel(0));
    engine.get(tiny_kernel(1));
    CacheCounters c = engine.counters();
    BOOST_TEST(c.compiles == 0u);
    BOOST_TEST(c.disk_hits == 2u);
    BOOST_TEST(entries(dir.path()).size() == 2u);  // no temp files left behind
    for (auto &p : entries(dir.path())) BOOST_TEST(p.extension() == ".cubin");
}

namespace {
// Damages the single entry in `dir` with `damage`, then expects a rejected entry + recompile.
template <class F> void expect_rebuild_after(F damage) {
    TempDir dir;
    { JitEngine(compile_only_jit_options(dir.string())).get(tiny_kernel()); }
    auto files = entries(dir.path());
    BOOST_REQUIRE(files.size() == 1u);
    std::string bytes;
    {
        std::ifstream in(files[0], std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    damage(bytes);
    {
        std::ofstream out(files[0], std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    LogCapture log;
    JitEngine engine(compile_only_jit_options(dir.string(), log.logger()));
    engine.get(tiny_kernel());
    CacheCounters c = engine.counters();
    BOOST_TEST(c.disk_hits == 0u);
    BOOST_TEST(c.disk_rejects == 1u);
    BOOST_TEST(c.compiles == 1u);
    BOOST_TEST(log.warnings.size() == 1u);
    // The rebuilt entry is valid again.
    JitEngine again(compile_only_jit_options(dir.string()));
    again.get(tiny_kernel());
    BOOST_TEST(again.counters().disk_hits == 1u);
}
}  // namespace

BOOST_AUTO_TEST_CASE(truncated_entry_is_rebuilt) {
    expect_rebuild_after([](std::string &b) { b.resize(b.size() / 2); });
    expect_rebuild_after([](std::string &b) { b.resize(10); });
}
BOOST_AUTO_TEST_CASE(flipped_payload_byte_is_rebuilt) {
    expect_rebuild_after([](std::string &b) { b[b.size() - 100] ^= 0x01; });
}
BOOST_AUTO_TEST_CASE(wrong_format_version_is_rebuilt) {
    expect_rebuild_after([](std::string &b) { b[8] = char(kCacheFormatVersion + 1); });
}
BOOST_AUTO_TEST_CASE(wrong_key_in_header_is_rebuilt) {
    expect_rebuild_after([](std::string &b) { b[20] ^= 0x40; });
}

BOOST_AUTO_TEST_CASE(four_processes_racing_leave_one_valid_entry) {
    TempDir dir;
    std::vector<pid_t> children;
    for (int i = 0; i < 4; ++i) {
        pid_t pid = ::fork();
        BOOST_REQUIRE(pid >= 0);
        if (pid == 0) {
            int code = 0;
            try {
                JitEngine engine(compile_only_jit_options(dir.string()));
                engine.get(tiny_kernel());
            } catch (...) {
                code = 1;
            }
            ::_exit(code);
        }
        children.push_back(pid);
    }
    for (pid_t pid : children) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    }
    BOOST_TEST(entries(dir.path()).size() == 1u);
    JitEngine engine(compile_only_jit_options(dir.string()));
    engine.get(tiny_kernel());
    BOOST_TEST(engine.counters().disk_hits == 1u);
}

BOOST_AUTO_TEST_CASE(unwritable_cache_folder_degrades_to_memory) {
    // CI runs as root, which ignores permission bits: a folder under a regular file can never
    // be created, whoever we are.
    TempDir dir;
    fs::path file = dir.path() / "not-a-folder";
    std::ofstream(file) << "x";
    LogCapture log;
    JitEngine engine(compile_only_jit_options((file / "cache").string(), log.logger()));
    engine.get(tiny_kernel());
    engine.get(tiny_kernel());
    BOOST_TEST(engine.counters().compiles == 1u);
    BOOST_TEST(engine.counters().memory_hits == 1u);
    BOOST_TEST(log.warnings.size() == 1u);
    BOOST_TEST(engine.cache_dir().empty());
}

BOOST_AUTO_TEST_CASE(jit_disabled_turns_a_miss_into_an_error) {
    TempDir dir;
    JitOptions o = compile_only_jit_options(dir.string());
    o.jit_enabled = false;
    JitEngine engine(o);
    try {
        engine.get(tiny_kernel());
        BOOST_FAIL("expected MOEJIT_ERROR_JIT_DISABLED");
    } catch (const Error &e) {
        BOOST_TEST(e.status() == Status::jit_disabled);
    }
    // A warmed cache serves it with JIT off.
    { JitEngine(compile_only_jit_options(dir.string())).get(tiny_kernel()); }
    JitEngine warmed(o);
    warmed.get(tiny_kernel());
    BOOST_TEST(warmed.counters().disk_hits == 1u);
}

BOOST_AUTO_TEST_CASE(compiles_for_sm80_and_sm90a) {
    for (const char *arch : {"sm_80", "sm_90a"}) {
        JitOptions o = compile_only_jit_options("");
        o.arch = arch;
        JitEngine engine(o);
        engine.get(tiny_kernel());
        BOOST_TEST(engine.counters().compiles == 1u);
    }
    BOOST_TEST(valid_arch("sm_90a"));
    BOOST_TEST(valid_arch("sm_80"));
    BOOST_TEST(!valid_arch("sm_75"));
    BOOST_TEST(!valid_arch("compute_90"));
    BOOST_TEST(!valid_arch("sm_9x"));
}

BOOST_AUTO_TEST_CASE(cache_folder_is_versioned) {
    BOOST_TEST(versioned_cache_dir("/x") == std::string("/x/") + MOEJIT_VERSION_STRING);
    BOOST_TEST(versioned_cache_dir("").empty());
    BOOST_TEST(cache_root("/explicit") == "/explicit");
}

BOOST_AUTO_TEST_CASE(arch_is_checked_against_nvrtcs_own_list) {
    const std::vector<int> &archs = nvrtc_supported_archs();
    BOOST_REQUIRE(!archs.empty());
    BOOST_TEST((std::find(archs.begin(), archs.end(), 90) != archs.end()));
    BOOST_CHECK_NO_THROW(require_nvrtc_arch("sm_90a"));
    BOOST_CHECK_NO_THROW(require_nvrtc_arch("sm_80"));
    // sm_99 passes valid_arch() (the form) but NVRTC cannot compile for it.
    BOOST_TEST(valid_arch("sm_99"));
    try {
        require_nvrtc_arch("sm_99");
        BOOST_FAIL("expected MOEJIT_ERROR_INVALID_ARGUMENT");
    } catch (const Error &e) {
        BOOST_TEST(e.status() == Status::invalid_argument);
        BOOST_TEST(std::string(e.what()).find("sm_99") != std::string::npos, e.what());
        BOOST_TEST(std::string(e.what()).find("sm_90") != std::string::npos, e.what());
    }
}

BOOST_AUTO_TEST_CASE(cuda_header_digest_covers_the_templates_toolkit_includes) {
    const std::vector<std::string> &files = cuda_headers_hashed();
    auto has = [&](const char *name) {
        return std::any_of(files.begin(), files.end(), [&](const std::string &f) {
            return fs::path(f).filename() == name;
        });
    };
    if (cuda_include_dir().empty()) return;
    for (const char *h : {"cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp16.h", "cuda_fp16.hpp", "vector_types.h"})
        BOOST_TEST(has(h), h);
    BOOST_TEST(cuda_headers_digest().size() == 64u);
}
