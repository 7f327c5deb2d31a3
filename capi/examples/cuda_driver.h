/*
 * The CUDA driver entry points that forward_backward.c and tools/moejit-bench.cpp use, loaded
 * with dlopen like moejit itself does: a program that includes this builds without the CUDA
 * toolkit and runs (reporting that) without a GPU. One loader for both, in C99 that C++ also
 * compiles; copy it together with the example. The functions are static: include it in one
 * file of a program.
 */
#ifndef MOEJIT_EXAMPLES_CUDA_DRIVER_H
#define MOEJIT_EXAMPLES_CUDA_DRIVER_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef unsigned long long cuda_devptr_t; /* CUdeviceptr on 64-bit platforms */

/* The CUDA ABI: int results (CUresult), 0 = success; handles as void pointers. */
struct cuda_driver {
    int (*init)(unsigned);
    int (*device_get)(int *, int);
    int (*device_get_name)(char *, int, int);
    int (*primary_ctx_retain)(void **, int);
    int (*primary_ctx_release)(int);
    int (*ctx_set_current)(void *);
    int (*ctx_synchronize)(void);
    int (*mem_alloc)(cuda_devptr_t *, size_t);
    int (*mem_free)(cuda_devptr_t);
    int (*memcpy_htod)(cuda_devptr_t, const void *, size_t);
    int (*memcpy_dtoh)(void *, cuda_devptr_t, size_t);
    int (*stream_create)(void **, unsigned);
    int (*stream_destroy)(void *);
    int (*stream_synchronize)(void *);
    int (*event_create)(void **, unsigned);
    int (*event_record)(void *, void *);
    int (*event_synchronize)(void *);
    int (*event_elapsed_time)(float *, void *, void *);
    int (*event_destroy)(void *);
    int (*get_error_name)(int, const char **);
};

/*
 * Loads libcuda.so.1 and every entry point into *cu. Returns the library's handle (to
 * dlclose when done with the driver), or NULL with the reason in err.
 */
static void *cuda_driver_load(struct cuda_driver *cu, char *err, size_t err_size) {
    static const struct {
        const char *name;
        size_t offset;
    } symbols[] = {
        {"cuInit", offsetof(struct cuda_driver, init)},
        {"cuDeviceGet", offsetof(struct cuda_driver, device_get)},
        {"cuDeviceGetName", offsetof(struct cuda_driver, device_get_name)},
        {"cuDevicePrimaryCtxRetain", offsetof(struct cuda_driver, primary_ctx_retain)},
        {"cuDevicePrimaryCtxRelease_v2", offsetof(struct cuda_driver, primary_ctx_release)},
        {"cuCtxSetCurrent", offsetof(struct cuda_driver, ctx_set_current)},
        {"cuCtxSynchronize", offsetof(struct cuda_driver, ctx_synchronize)},
        {"cuMemAlloc_v2", offsetof(struct cuda_driver, mem_alloc)},
        {"cuMemFree_v2", offsetof(struct cuda_driver, mem_free)},
        {"cuMemcpyHtoD_v2", offsetof(struct cuda_driver, memcpy_htod)},
        {"cuMemcpyDtoH_v2", offsetof(struct cuda_driver, memcpy_dtoh)},
        {"cuStreamCreate", offsetof(struct cuda_driver, stream_create)},
        {"cuStreamDestroy_v2", offsetof(struct cuda_driver, stream_destroy)},
        {"cuStreamSynchronize", offsetof(struct cuda_driver, stream_synchronize)},
        {"cuEventCreate", offsetof(struct cuda_driver, event_create)},
        {"cuEventRecord", offsetof(struct cuda_driver, event_record)},
        {"cuEventSynchronize", offsetof(struct cuda_driver, event_synchronize)},
        {"cuEventElapsedTime", offsetof(struct cuda_driver, event_elapsed_time)},
        {"cuEventDestroy_v2", offsetof(struct cuda_driver, event_destroy)},
        {"cuGetErrorName", offsetof(struct cuda_driver, get_error_name)},
    };
    size_t i;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(err, err_size, "could not load libcuda.so.1: %s", dlerror());
        return NULL;
    }
    for (i = 0; i < sizeof symbols / sizeof symbols[0]; ++i) {
        void *f = dlsym(lib, symbols[i].name);
        if (!f) {
            snprintf(err, err_size, "libcuda.so.1 has no %s", symbols[i].name);
            dlclose(lib);
            return NULL;
        }
        /* ISO C and C++ have no object-to-function pointer cast; POSIX makes their sizes equal. */
        memcpy((char *)cu + symbols[i].offset, &f, sizeof f);
    }
    return lib;
}

#endif /* MOEJIT_EXAMPLES_CUDA_DRIVER_H */
