// capi/moejit.h and include/moejit/moejit.hpp compile on their own as C++ and link.
#include "moejit/moejit.hpp"
#include "moejit.h"

#include <cstdio>

int main() {
    std::printf("moejit %s\n", moejit_version());
    moejit_context_destroy(nullptr);
    moejit::api::ContextOptions options;  // since 0.6: the switches as C++ values
    options.gather = true;
    options.gemm_tile = "";
    if (options.c_options().gather != MOEJIT_SWITCH_ON) return 1;
    try {
        moejit::api::check(MOEJIT_ERROR_INVALID_ARGUMENT);
    } catch (const moejit::api::Exception &e) {
        return e.status() == MOEJIT_ERROR_INVALID_ARGUMENT ? 0 : 1;
    }
    return 1;
}
