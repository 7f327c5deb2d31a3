// Routes library messages to the user's log callback (silent without one).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moejit {

// The values are moejit_log_level_t's (capi/capi_convert.cpp asserts each one).
enum class LogLevel : std::int32_t {
    debug = 0,
    info = 1,
    warning = 2,
    error = 3,
};

// Receives each message, NUL-terminated, with the user_data it was registered with. The C ABI
// registers one that calls the caller's moejit_log_fn (capi/capi_convert.cpp).
using LogFn = void (*)(LogLevel level, const char *message, void *user_data);

struct Logger {
    LogFn fn = nullptr;
    void *user_data = nullptr;
    // Delivers now, or records into the calling thread's active LogBuffer.
    void operator()(LogLevel level, std::string_view message) const;
};

// While one is active on a thread, that thread's messages are recorded instead of delivered,
// so work done under a lock or a once-flag (a compile, a cache read) can hand its messages to
// the user's callback after releasing it: a callback may then call back into the library
// without deadlocking. Only the outermost buffer of a thread records.
class LogBuffer {
public:
    LogBuffer();
    ~LogBuffer();  // delivers what is still recorded
    LogBuffer(const LogBuffer &) = delete;
    LogBuffer &operator=(const LogBuffer &) = delete;

    struct Message {
        Logger logger;
        LogLevel level;
        std::string text;
    };
    // Hands over the recorded messages (e.g. to another thread that delivers them in order).
    std::vector<Message> take();
    // Delivers the recorded messages in order, on the calling thread.
    void deliver();
    static void deliver(std::vector<Message> &messages);

private:
    friend struct Logger;
    bool owner_;  // the thread's outermost buffer
    std::vector<Message> messages_;
};

}  // namespace moejit
