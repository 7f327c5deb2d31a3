#include "base/logger.hpp"

#include <utility>

namespace moejit {
namespace {
thread_local LogBuffer *active_buffer = nullptr;
}  // namespace

void Logger::operator()(LogLevel level, std::string_view message) const {
    if (!fn) return;
    if (active_buffer) {
        active_buffer->messages_.push_back(LogBuffer::Message{*this, level, std::string(message)});
        return;
    }
    std::string text(message);  // the callback gets a NUL-terminated copy
    fn(level, text.c_str(), user_data);
}

LogBuffer::LogBuffer() : owner_(active_buffer == nullptr) {
    if (owner_) active_buffer = this;
}

LogBuffer::~LogBuffer() {
    if (!owner_) return;
    active_buffer = nullptr;
    try {
        deliver(messages_);
    } catch (...) {  // a callback must not throw; never let it escape a destructor
    }
}

std::vector<LogBuffer::Message> LogBuffer::take() { return std::exchange(messages_, {}); }

void LogBuffer::deliver() {
    if (!owner_) return;  // an outer buffer delivers
    active_buffer = nullptr;
    deliver(messages_);
    messages_.clear();
    active_buffer = this;
}

void LogBuffer::deliver(std::vector<Message> &messages) {
    for (const Message &m : messages) m.logger.fn(m.level, m.text.c_str(), m.logger.user_data);
}

}  // namespace moejit
