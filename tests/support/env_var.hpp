// Sets (or, with nullptr, unsets) an environment variable for one scope, restoring what was
// there before. Header-only.
#pragma once

#include <stdlib.h>

#include <string>

namespace moejit::test {

class EnvVar {
public:
    EnvVar(const char *name, const char *value) : name_(name) {
        if (const char *old = ::getenv(name)) old_ = old, had_ = true;
        if (value) ::setenv(name, value, 1);
        else ::unsetenv(name);
    }
    ~EnvVar() {
        if (had_) ::setenv(name_, old_.c_str(), 1);
        else ::unsetenv(name_);
    }
    EnvVar(const EnvVar &) = delete;
    EnvVar &operator=(const EnvVar &) = delete;

private:
    const char *name_;
    std::string old_;
    bool had_ = false;
};

}  // namespace moejit::test
