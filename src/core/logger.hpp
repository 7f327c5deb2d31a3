// Routes library messages to the user's log callback (silent without one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moejit.h"

namespace moejit {

struct Logger {
    moejit_log_fn fn = nullptr;
    void *user_data = nullptr;
    // Delivers now, or records into the calling thread's active LogBuffer.
    void operator()(moejit_log_level_t level, std::string_view message) const;
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
        moejit_log_level_t level;
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
