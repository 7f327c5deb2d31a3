/* Test support for the GPU tests written in C: a context on device 0 and the driver API for their
 * buffers (tests/abi/c_cuda.h), or NULL, having said why, when either is missing (skip: exit 77). */
#ifndef MOEJIT_TEST_C_GPU_CONTEXT_H
#define MOEJIT_TEST_C_GPU_CONTEXT_H

#include <stdio.h>

#include "moejit.h"
#include "../abi/c_cuda.h"

static moejit_context_t gpu_context_or_skip(void) {
    moejit_context_t c = NULL;
    const moejit_status_t s = moejit_context_create(NULL, &c);
    if (s != MOEJIT_SUCCESS) {
        printf("skipping: no usable GPU (%s: %s)\n", moejit_status_string(s), moejit_last_error());
        return NULL;
    }
    if (!c_cuda_open()) {
        printf("skipping: the driver API for test buffers is unavailable\n");
        moejit_context_destroy(c);
        return NULL;
    }
    return c;
}

#endif
