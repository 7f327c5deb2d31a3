// NVRTC in worker processes (runtime/compile_worker.hpp says why).
//
// The exchange, over a socket pair (send() with MSG_NOSIGNAL: a worker that dies gives an error,
// not a SIGPIPE in the caller's process): each field a little-endian u64 byte count and the bytes.
//   request: "moejit-compile-1", library version, arch, name, template, entry, source,
//            option count (as text), the options
//   answer:  "ok", cubin, lowered name, log, seconds (as text)
//            | "error", status (as text), message
#include "runtime/compile_worker.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "base/error.hpp"
#include "moejit_version.h"
#include "runtime/cache_paths.hpp"
#include "runtime/config.hpp"
#include "runtime/nvrtc_loader.hpp"

extern char **environ;

namespace moejit {
namespace {

constexpr const char *kProtocol = "moejit-compile-1";

void put_field(std::string &out, const std::string &v) {
    std::uint64_t n = v.size();
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out += v;
}

// Reads exactly n bytes; false on end of input or error.
template <class Read> bool read_exact(Read read, char *p, std::size_t n) {
    while (n > 0) {
        const long got = read(p, n);
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

template <class Read> bool get_field(Read read, std::string &v, std::size_t limit = std::size_t{1} << 30) {
    unsigned char len[8];
    if (!read_exact(read, reinterpret_cast<char *>(len), 8)) return false;
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t{len[i]} << (8 * i);
    if (n > limit) return false;
    v.resize(static_cast<std::size_t>(n));
    return n == 0 || read_exact(read, v.data(), v.size());
}

bool executable(const std::string &path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

std::string find_worker() {
    if (!env_compile_in_processes()) return {};
    if (std::optional<std::string> forced = env_compile_worker()) return executable(*forced) ? *forced : std::string();
    const std::string here = library_folder();
    if (here.empty()) return {};
    for (const char *rel : {"moejit-compile-worker", "../src/moejit-compile-worker", "../libexec/moejit/moejit-compile-worker",
                            "../../libexec/moejit/moejit-compile-worker"}) {
        std::error_code ec;
        const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::path(here) / rel, ec);
        if (!ec && executable(p.string())) return p.string();
    }
    return {};
}

// Closes fd on scope exit.
struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

const std::string &compile_worker_path() {
    static const std::string path = find_worker();
    return path;
}

std::optional<CompiledKernel> compile_in_worker(const KernelSource &source, const std::string &arch,
                                                const std::vector<std::string> &options) {
    const std::string &worker = compile_worker_path();
    if (worker.empty()) return std::nullopt;
    // The worker loads the NVRTC this process chose (its version and headers are in the key),
    // not what the rule finds from the worker's own folder.
    std::string nvrtc_var = "MOEJIT_NVRTC=" + nvrtc().path;
    std::vector<char *> env;
    for (char **e = environ; *e; ++e)
        if (std::strncmp(*e, "MOEJIT_NVRTC=", 13) != 0) env.push_back(*e);
    env.push_back(nvrtc_var.data());
    env.push_back(nullptr);
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return std::nullopt;
    Fd ours{pair[0]}, theirs{pair[1]};
    // The child's stdin and stdout are its end of the pair (dup2 clears close-on-exec); stderr
    // stays the caller's.
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0) return std::nullopt;
    char arg0[] = "moejit-compile-worker";
    char *argv[] = {arg0, nullptr};
    pid_t pid = -1;
    const int spawned = posix_spawn_file_actions_adddup2(&actions, theirs.fd, 0) != 0   ? -1
                        : posix_spawn_file_actions_adddup2(&actions, theirs.fd, 1) != 0 ? -1
                        : posix_spawn(&pid, worker.c_str(), &actions, nullptr, argv, env.data());
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return std::nullopt;
    ::close(theirs.fd);
    theirs.fd = -1;

    std::string request;
    put_field(request, kProtocol);
    put_field(request, MOEJIT_VERSION_STRING);
    put_field(request, arch);
    put_field(request, source.name);
    put_field(request, source.template_name);
    put_field(request, source.entry);
    put_field(request, source.source);
    put_field(request, std::to_string(options.size()));
    for (const std::string &o : options) put_field(request, o);
    bool sent = true;
    for (std::size_t off = 0; off < request.size();) {
        const ssize_t n = ::send(ours.fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            sent = false;
            break;
        }
        off += static_cast<std::size_t>(n);
    }
    ::shutdown(ours.fd, SHUT_WR);
    auto read = [&](char *p, std::size_t n) -> long {
        for (;;) {
            const ssize_t got = ::recv(ours.fd, p, n, 0);
            if (got < 0 && errno == EINTR) continue;
            return static_cast<long>(got);
        }
    };
    std::string kind, a, b, c, d;
    double seconds = 0;
    bool answered = false;
    try {  // the child is reaped below whatever the answer was
        answered = sent && get_field(read, kind) &&
                   (kind == "ok" ? get_field(read, a) && get_field(read, b) && get_field(read, c) && get_field(read, d)
                                 : kind == "error" && get_field(read, a) && get_field(read, b));
        if (answered && kind == "ok") seconds = std::stod(d);
    } catch (const std::exception &) {  // an allocation for a bad length, or seconds that do not parse
        answered = false;
    }
    int wstatus = 0;
    struct rusage usage {};
    while (::wait4(pid, &wstatus, 0, &usage) < 0 && errno == EINTR) {
    }
    if (!answered)
        fail(Status::internal, "the compile worker {} gave no answer for kernel {} ({}); set MOEJIT_COMPILE_WORKERS=threads "
             "to compile in this process", worker, source.name,
             WIFSIGNALED(wstatus) ? fmt::format("killed by signal {}", WTERMSIG(wstatus))
                                  : fmt::format("exit code {}", WEXITSTATUS(wstatus)));
    if (kind == "error") throw Error(a == std::to_string(static_cast<int>(Status::compile)) ? Status::compile : Status::internal, b);
    CompiledKernel out;
    out.cubin.assign(a.begin(), a.end());
    out.lowered_name = std::move(b);
    out.log = std::move(c);
    out.seconds = seconds;
    out.worker_cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                             1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    return out;
}

int compile_worker_main(std::FILE *in, std::FILE *out) {
    auto read = [&](char *p, std::size_t n) -> long { return static_cast<long>(std::fread(p, 1, n, in)); };
    std::string protocol, version, arch, count;
    KernelSource source;
    if (!get_field(read, protocol) || protocol != kProtocol || !get_field(read, version) ||
        version != MOEJIT_VERSION_STRING || !get_field(read, arch) || !get_field(read, source.name) ||
        !get_field(read, source.template_name) || !get_field(read, source.entry) || !get_field(read, source.source) ||
        !get_field(read, count))
        return 2;
    if (count.empty() || count.size() > 4 || count.find_first_not_of("0123456789") != std::string::npos) return 2;
    std::vector<std::string> options(static_cast<std::size_t>(std::stoul(count)));
    for (std::string &o : options)
        if (!get_field(read, o)) return 2;
    std::string answer;
    try {
        const CompiledKernel k = nvrtc_compile(source, arch, options);
        put_field(answer, "ok");
        put_field(answer, std::string(k.cubin.begin(), k.cubin.end()));
        put_field(answer, k.lowered_name);
        put_field(answer, k.log);
        put_field(answer, fmt::format("{:.17g}", k.seconds));
    } catch (const std::exception &e) {  // moejit's Error keeps its status, anything else is internal
        const auto *error = dynamic_cast<const Error *>(&e);
        put_field(answer, "error");
        put_field(answer, std::to_string(static_cast<int>(error ? error->status() : Status::internal)));
        put_field(answer, e.what());
    }
    return std::fwrite(answer.data(), 1, answer.size(), out) == answer.size() && std::fflush(out) == 0 ? 0 : 2;
}

}  // namespace moejit
