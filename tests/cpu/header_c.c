/* capi/moejit.h compiles on its own as C99 (-std=c99 -pedantic -Werror) and links. */
#include "moejit.h"

#include <stdio.h>

int main(void) {
    moejit_context_options_t options;
    if (moejit_context_options_init(&options) != MOEJIT_SUCCESS) return 1;
    options.tune = MOEJIT_SWITCH_FROM_ENV; /* since 0.6 */
    options.gather = MOEJIT_SWITCH_ON;
    options.fuse_swiglu = MOEJIT_SWITCH_OFF;
    options.gemm_tile = NULL;
    if (moejit_plan_describe(NULL, NULL, 0, NULL) != MOEJIT_ERROR_INVALID_ARGUMENT) return 1;
    printf("moejit %s (%d): %s\n", moejit_version(), moejit_version_number(),
           moejit_status_string(MOEJIT_ERROR_NO_DRIVER));
    moejit_context_destroy(NULL);
    moejit_plan_destroy(NULL);
    return moejit_version_number() == MOEJIT_VERSION_MAJOR * 10000 + MOEJIT_VERSION_MINOR * 100 +
                                          MOEJIT_VERSION_PATCH ? 0 : 1;
}
