/* The few CUDA driver calls the C GPU tests need (device buffers, copies), through dlopen like
 * the library itself, so the tests link no CUDA library and build everywhere. C99. */
#ifndef MOEJIT_TEST_C_CUDA_H
#define MOEJIT_TEST_C_CUDA_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef unsigned long long c_cu_ptr;
typedef struct {
    int (*init)(unsigned);
    int (*device_get)(int *, int);
    int (*primary_retain)(void **, int);
    int (*ctx_set_current)(void *);
    int (*mem_alloc)(c_cu_ptr *, size_t);
    int (*mem_free)(c_cu_ptr);
    int (*htod)(c_cu_ptr, const void *, size_t);
    int (*dtoh)(void *, c_cu_ptr, size_t);
    int (*memset8)(c_cu_ptr, unsigned char, size_t);
    int (*sync)(void);
} c_cuda_api;

static c_cuda_api c_cuda;

/* 1 when the driver and device 0 are usable (its primary context current), else 0. */
static inline int c_cuda_open(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *ctx = NULL;
    int dev = 0;
    if (!h) return 0;
#define C_CUDA_SYM(field, name)                                            \
    *(void **)(&c_cuda.field) = dlsym(h, name);                            \
    if (!c_cuda.field) return 0;
    C_CUDA_SYM(init, "cuInit")
    C_CUDA_SYM(device_get, "cuDeviceGet")
    C_CUDA_SYM(primary_retain, "cuDevicePrimaryCtxRetain")
    C_CUDA_SYM(ctx_set_current, "cuCtxSetCurrent")
    C_CUDA_SYM(mem_alloc, "cuMemAlloc_v2")
    C_CUDA_SYM(mem_free, "cuMemFree_v2")
    C_CUDA_SYM(htod, "cuMemcpyHtoD_v2")
    C_CUDA_SYM(dtoh, "cuMemcpyDtoH_v2")
    C_CUDA_SYM(memset8, "cuMemsetD8_v2")
    C_CUDA_SYM(sync, "cuCtxSynchronize")
#undef C_CUDA_SYM
    if (c_cuda.init(0) != 0 || c_cuda.device_get(&dev, 0) != 0 || c_cuda.primary_retain(&ctx, dev) != 0 ||
        c_cuda.ctx_set_current(ctx) != 0)
        return 0;
    return 1;
}

/* A zeroed device buffer of `bytes` (at least 1); aborts the test on failure. */
static inline void *c_cuda_alloc(size_t bytes) {
    c_cu_ptr p = 0;
    if (bytes == 0) bytes = 1;
    if (c_cuda.mem_alloc(&p, bytes) != 0 || c_cuda.memset8(p, 0, bytes) != 0) {
        fprintf(stderr, "cuMemAlloc(%zu) failed\n", bytes);
        abort();
    }
    return (void *)(size_t)p;
}
static inline void c_cuda_free(void *p) {
    if (p) c_cuda.mem_free((c_cu_ptr)(size_t)p);
}
static inline void c_cuda_put(void *dst, const void *src, size_t n) {
    if (c_cuda.htod((c_cu_ptr)(size_t)dst, src, n) != 0) abort();
}
static inline void c_cuda_get(void *dst, const void *src, size_t n) {
    if (c_cuda.sync() != 0 || c_cuda.dtoh(dst, (c_cu_ptr)(size_t)src, n) != 0) {
        fprintf(stderr, "a kernel or copy failed\n");
        abort();
    }
}

#endif
