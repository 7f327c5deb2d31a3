/* Bad input at every entry point of moejit.h, from C (issue 16 item 7): NULLs, negative and
 * overflowing sizes, bad enums, struct_size zero / unreleased / newer, buffers one byte short,
 * misaligned pointers. Each case asserts the status and that moejit_last_error() names the
 * argument. Needs no GPU: the ops run on a compile-only context, whose argument checks all come
 * before it needs a device (the last case of each op, valid arguments, shows that); the plan
 * calls that need a plan (device) are in tests/gpu/test_bad_input_gpu.c. Pointers here are
 * never dereferenced: every case fails validation on the host.
 */
#include "moejit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/c_check.h"
#include "layer_args.h"

#define INV MOEJIT_ERROR_INVALID_ARGUMENT
#define UNS MOEJIT_ERROR_UNSUPPORTED
#define OK MOEJIT_SUCCESS
#define GUARD 0xA5

/* Fake, suitably aligned "device" pointers (never dereferenced). */
static void *P(uintptr_t i) { return (void *)(uintptr_t)(0x10000000u + i * 0x100000u); }
static void *MIS(uintptr_t i, uintptr_t by) { return (char *)P(i) + by; }

static int all_bytes(const void *p, size_t n, unsigned char v) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; ++i)
        if (b[i] != v) return 0;
    return 1;
}

static moejit_context_t compile_only_context(void) {
    moejit_context_options_t o;
    moejit_context_t c = NULL;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = ""; /* memory only: nothing is compiled here anyway */
    CHECK_STATUS(moejit_context_create(&o, &c), OK, NULL);
    return c;
}

/* ------------------------------------------------------------ status, version */
static void test_status_and_version(void) {
    int nvrtc = 0;
    CHECK(strcmp(moejit_status_string(MOEJIT_SUCCESS), "MOEJIT_SUCCESS") == 0);
    CHECK(strcmp(moejit_status_string((moejit_status_t)999), "unknown status") == 0);
    CHECK(strcmp(moejit_status_string((moejit_status_t)-1), "unknown status") == 0);
    CHECK(moejit_version() != NULL && strcmp(moejit_version(), MOEJIT_VERSION_STRING) == 0);
    CHECK(moejit_version_number() == MOEJIT_VERSION_MAJOR * 10000 + MOEJIT_VERSION_MINOR * 100 + MOEJIT_VERSION_PATCH);
    CHECK_STATUS(moejit_nvrtc_version(NULL), INV, "version");
    CHECK_STATUS(moejit_nvrtc_version(&nvrtc), OK, NULL);
    CHECK(moejit_last_error()[0] == '\0'); /* a success clears the message */
}

/* ------------------------------------------------------------ *_init and *_init_sized
 * Each init, through the macro and sized: never writes past the size passed; the unreleased
 * sizes and 0 write nothing; a newer header's size zeroes the unknown tail. */
#define CHECK_INIT(T, FN, ARG)                                                                       \
    do {                                                                                            \
        unsigned char buf[sizeof(T) + 64];                                                          \
        T *s = (T *)(void *)buf;                                                                    \
        memset(buf, GUARD, sizeof buf);                                                             \
        CHECK_STATUS(FN(s), OK, NULL); /* the macro: the caller's sizeof */                         \
        CHECK(s->struct_size == sizeof(T));                                                         \
        CHECK(all_bytes(buf + sizeof(T), 64, GUARD));                                               \
        memset(buf, GUARD, sizeof buf);                                                             \
        CHECK_STATUS((FN)(s), OK, NULL); /* the exported unsized function: 0.3's size, here sizeof */ \
        CHECK(all_bytes(buf + sizeof(T), 64, GUARD));                                               \
        memset(buf, GUARD, sizeof buf);                                                             \
        CHECK_STATUS(FN##_sized(NULL, sizeof(T)), INV, ARG);                                        \
        CHECK_STATUS(FN##_sized(s, 0), INV, "struct_size");                                         \
        CHECK_STATUS(FN##_sized(s, 8), INV, "struct_size");                                         \
        CHECK_STATUS(FN##_sized(s, sizeof(T) - 1), INV, "struct_size");                             \
        CHECK_STATUS(FN##_sized(s, (size_t)1 << 40), INV, "struct_size");                          \
        CHECK(all_bytes(buf, sizeof buf, GUARD)); /* the refused calls wrote nothing */             \
        CHECK_STATUS(FN##_sized(s, sizeof(T) + 16), OK, NULL); /* a newer header's struct */        \
        CHECK(s->struct_size == sizeof(T) + 16);                                                    \
        CHECK(all_bytes(buf + sizeof(T), 16, 0));                                                   \
        CHECK(all_bytes(buf + sizeof(T) + 16, 48, GUARD));                                          \
    } while (0)

static void test_inits(void) {
    CHECK_INIT(moejit_context_options_t, moejit_context_options_init, "options");
    CHECK_INIT(moejit_cache_stats_t, moejit_cache_stats_init, "stats");
    CHECK_INIT(moejit_group_gemm_nk_args_t, moejit_group_gemm_nk_args_init, "args");
    CHECK_INIT(moejit_group_gemm_mn_args_t, moejit_group_gemm_mn_args_init, "args");
    CHECK_INIT(moejit_swiglu_args_t, moejit_swiglu_args_init, "args");
    CHECK_INIT(moejit_plan_desc_t, moejit_plan_desc_init, "desc");
    CHECK_INIT(moejit_forward_args_t, moejit_forward_args_init, "args");
    CHECK_INIT(moejit_backward_args_t, moejit_backward_args_init, "args");
    /* A current binary gets the full init through the macro (CHECK_INIT); the exported unsized
     * function, which 0.1-0.3 binaries call without saying their size, writes 0.1's 152 bytes
     * only (issue 29 item 4: it wrote 160, past a 0.1 caller's struct) and marks struct_size. */
    {
        moejit_backward_args_t b;
        unsigned char *bytes = (unsigned char *)(void *)&b;
        memset(&b, GUARD, sizeof b);
        CHECK_STATUS((moejit_backward_args_init)(&b), OK, NULL);
        CHECK(b.struct_size == 153);
        CHECK(all_bytes(bytes + offsetof(moejit_backward_args_t, x),
                        sizeof b - offsetof(moejit_backward_args_t, x), GUARD));
        CHECK(b.num_tokens == 0 && b.workspace == NULL && b.stream == NULL);
        b.x = NULL; /* T = 0 needs no x; then the plan handle is checked */
        CHECK_STATUS(moejit_plan_backward(NULL, &b), INV, "plan is NULL");
    }
    /* moejit_backward_args_t's 0.1 size (before x) is a released size: exactly it is written. */
    {
        unsigned char buf[sizeof(moejit_backward_args_t) + 64];
        const size_t v01 = offsetof(moejit_backward_args_t, x);
        memset(buf, GUARD, sizeof buf);
        CHECK_STATUS(moejit_backward_args_init_sized((moejit_backward_args_t *)(void *)buf, v01), OK, NULL);
        CHECK(((moejit_backward_args_t *)(void *)buf)->struct_size == v01);
        CHECK(all_bytes(buf + v01, sizeof buf - v01, GUARD));
    }
    /* Defaults survive the sized init. */
    {
        moejit_plan_desc_t d;
        moejit_plan_desc_init(&d);
        CHECK(d.dtype == MOEJIT_DTYPE_BF16 && d.index_dtype == MOEJIT_DTYPE_INT64);
    }
}

/* ------------------------------------------------------------ contexts */
static void test_context(void) {
    moejit_context_options_t o;
    moejit_context_t c = NULL;
    const char *s = NULL;
    struct {
        moejit_context_options_t o;
        unsigned char tail[24];
    } newer;

    CHECK_STATUS(moejit_context_create(NULL, NULL), INV, "context");
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.struct_size = 0;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "options->struct_size");
    CHECK(c == NULL);
    o.struct_size = 24;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "options->struct_size");
    o.struct_size = sizeof o - 8;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "options->struct_size");
    o.struct_size = (size_t)-1;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "options->struct_size");
    o.struct_size = sizeof o;

    /* A newer header's options: accepted with its unknown fields zero, refused otherwise. */
    memset(&newer, 0, sizeof newer);
    newer.o = o;
    newer.o.struct_size = sizeof newer;
    CHECK_STATUS(moejit_context_create(&newer.o, &c), OK, NULL);
    moejit_context_destroy(c);
    c = NULL;
    newer.tail[5] = 1;
    CHECK_STATUS(moejit_context_create(&newer.o, &c), INV, "options->struct_size");
    CHECK(c == NULL);

    o.jit_mode = 7;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "jit_mode");
    o.jit_mode = -1;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "jit_mode");
    o.jit_mode = 0;
    o.arch = NULL;
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "arch");
    o.arch = "sm_banana";
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "sm_banana");
    o.arch = "";
    CHECK_STATUS(moejit_context_create(&o, &c), INV, "arch");
    o.arch = "sm_90a";
    CHECK(c == NULL);

    moejit_context_destroy(NULL); /* a no-op */
    CHECK_STATUS(moejit_context_arch(NULL, &s), INV, "context");
    CHECK_STATUS(moejit_context_cache_dir(NULL, &s), INV, "context");
    CHECK_STATUS(moejit_context_cache_stats(NULL, NULL), INV, "context");

    c = compile_only_context();
    CHECK_STATUS(moejit_context_arch(c, NULL), INV, "arch");
    CHECK_STATUS(moejit_context_cache_dir(c, NULL), INV, "dir");
    CHECK_STATUS(moejit_context_cache_stats(c, NULL), INV, "stats");
    {
        /* Output struct: only the caller's struct_size is written. */
        struct {
            moejit_cache_stats_t s;
            unsigned char tail[32];
        } st;
        memset(&st, GUARD, sizeof st);
        st.s.struct_size = 0;
        CHECK_STATUS(moejit_context_cache_stats(c, &st.s), INV, "stats->struct_size");
        st.s.struct_size = 16;
        CHECK_STATUS(moejit_context_cache_stats(c, &st.s), INV, "stats->struct_size");
        CHECK(all_bytes((unsigned char *)&st + sizeof(size_t), sizeof st - sizeof(size_t), GUARD));
        st.s.struct_size = sizeof st.s + 16; /* newer: the unknown 16 bytes keep the caller's values */
        CHECK_STATUS(moejit_context_cache_stats(c, &st.s), OK, NULL);
        CHECK(st.s.compiles == 0 && st.s.memory_hits == 0);
        CHECK(all_bytes(st.tail, sizeof st.tail, GUARD));
        st.s.struct_size = sizeof st.s;
        CHECK_STATUS(moejit_context_cache_stats(c, &st.s), OK, NULL);
    }
    moejit_context_destroy(c);
}

/* ------------------------------------------------------------ routing ops */
static void test_routing(moejit_context_t c) {
    size_t ws = 0, need = 0;
    int32_t *cnt = (int32_t *)P(1), *off = (int32_t *)P(2), *si = (int32_t *)P(3);
    const void *ids = P(4);
    void *work = P(5);

    CHECK_STATUS(moejit_routing_index_workspace_size(8, 2, 4, NULL), INV, "bytes");
    CHECK_STATUS(moejit_routing_index_workspace_size(-1, 2, 4, &ws), INV, "num_tokens");
    CHECK_STATUS(moejit_routing_index_workspace_size(8, 0, 4, &ws), INV, "top_k");
    CHECK_STATUS(moejit_routing_index_workspace_size(8, -3, 4, &ws), INV, "top_k");
    CHECK_STATUS(moejit_routing_index_workspace_size(8, 2, 0, &ws), INV, "num_experts");
    CHECK_STATUS(moejit_routing_index_workspace_size(8, 2, INT32_MAX, &ws), UNS, "num_experts");
    CHECK_STATUS(moejit_routing_index_workspace_size(INT64_MAX, 2, 4, &ws), UNS, "num_tokens");
    CHECK_STATUS(moejit_routing_index_workspace_size(INT64_MAX / 2 + 1, 2, 4, &ws), UNS, "num_tokens");
    CHECK_STATUS(moejit_routing_index_workspace_size(1 << 20, 8, 64, &need), OK, NULL);

#define RI(ctx, dt, sel, T, k, E, counts, offsets, scatter, w, wsz) \
    moejit_routing_index(ctx, dt, sel, T, k, E, counts, offsets, scatter, w, wsz, NULL)
    CHECK_STATUS(RI(NULL, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, off, si, work, need), INV, "context");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_FP32, ids, 1 << 20, 8, 64, cnt, off, si, work, need), INV, "index_dtype");
    CHECK_STATUS(RI(c, (moejit_dtype_t)99, ids, 1 << 20, 8, 64, cnt, off, si, work, need), INV, "index_dtype");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, -5, 8, 64, cnt, off, si, work, need), INV, "num_tokens");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, INT64_MAX, 8, 64, cnt, off, si, work, need), UNS, "num_tokens");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 0, 64, cnt, off, si, work, need), INV, "top_k");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 0, cnt, off, si, work, need), INV, "num_experts");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, NULL, 1 << 20, 8, 64, cnt, off, si, work, need), INV, "selected_experts");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, NULL, off, si, work, need), INV, "counts");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, NULL, si, work, need), INV, "offsets");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, off, NULL, work, need), INV, "scatter_index");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, off, si, NULL, need), INV, "workspace");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, off, si, work, need - 1), INV, "workspace_size");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT64, MIS(4, 4), 1 << 20, 8, 64, cnt, off, si, work, need), INV, "selected_experts");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, (int32_t *)MIS(1, 2), off, si, work, need), INV, "counts");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, off, si, MIS(5, 1), need), INV, "workspace");
    CHECK_STATUS(RI(c, MOEJIT_DTYPE_INT32, ids, 1 << 20, 8, 64, cnt, off, si, work, need), INV, "compile-only");
#undef RI

    /* scatter */
    CHECK_STATUS(moejit_scatter(NULL, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, 64, P(2), NULL), INV, "context");
    CHECK_STATUS(moejit_scatter(c, (moejit_dtype_t)0, P(1), si, 16, 2, 64, P(2), NULL), INV, "dtype");
    CHECK_STATUS(moejit_scatter(c, (moejit_dtype_t)77, P(1), si, 16, 2, 64, P(2), NULL), INV, "dtype");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_INT32, P(1), si, 16, 2, 64, P(2), NULL), INV, "dtype");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, NULL, si, 16, 2, 64, P(2), NULL), INV, "x");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), NULL, 16, 2, 64, P(2), NULL), INV, "scatter_index");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, 64, NULL, NULL), INV, "xs");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, -1, 2, 64, P(2), NULL), INV, "num_tokens");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, INT64_MAX, 2, 64, P(2), NULL), UNS, "num_tokens");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 0, 64, P(2), NULL), INV, "top_k");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, 0, P(2), NULL), INV, "hidden_size");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, -64, P(2), NULL), INV, "hidden_size");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, INT64_MAX, P(2), NULL), UNS, "hidden_size");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, MIS(1, 2), si, 16, 2, 64, P(2), NULL), INV, "x");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, 64, MIS(2, 8), NULL), INV, "xs");
    CHECK_STATUS(moejit_scatter(c, MOEJIT_DTYPE_BF16, P(1), si, 16, 2, 64, P(2), NULL), INV, "compile-only");

    /* gather */
    CHECK_STATUS(moejit_gather(NULL, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, P(2), NULL), INV, "context");
    CHECK_STATUS(moejit_gather(c, (moejit_dtype_t)42, P(1), si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, P(2), NULL), INV, "dtype");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, P(3), (moejit_dtype_t)42, 16, 2, 64, P(2), NULL), INV, "weight_dtype");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, P(3), MOEJIT_DTYPE_INT64, 16, 2, 64, P(2), NULL), INV, "weight_dtype");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, NULL, si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, P(2), NULL), INV, "ys");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), NULL, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, P(2), NULL), INV, "scatter_index");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, NULL, NULL), INV, "out");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, -2, 2, 64, P(2), NULL), INV, "num_tokens");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, INT64_MAX, 2, 64, P(2), NULL), UNS, "num_tokens");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, 16, -1, 64, P(2), NULL), INV, "top_k");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 0, P(2), NULL), INV, "hidden_size");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, MIS(1, 4), si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, P(2), NULL), INV, "ys");
    CHECK_STATUS(moejit_gather(c, MOEJIT_DTYPE_BF16, P(1), si, NULL, MOEJIT_DTYPE_FP32, 16, 2, 64, P(2), NULL), INV, "compile-only");

    /* scatter_weights / gather_weights */
    CHECK_STATUS(moejit_scatter_weights(NULL, MOEJIT_DTYPE_FP32, P(1), si, 16, 2, (float *)P(2), NULL), INV, "context");
    CHECK_STATUS(moejit_scatter_weights(c, (moejit_dtype_t)9, P(1), si, 16, 2, (float *)P(2), NULL), INV, "weight_dtype");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, NULL, si, 16, 2, (float *)P(2), NULL), INV, "weights");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, P(1), NULL, 16, 2, (float *)P(2), NULL), INV, "scatter_index");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, P(1), si, 16, 2, NULL, NULL), INV, "w_s");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, P(1), si, -16, 2, (float *)P(2), NULL), INV, "num_tokens");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, P(1), si, INT64_MAX, 2, (float *)P(2), NULL), UNS, "num_tokens");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, P(1), si, 16, 0, (float *)P(2), NULL), INV, "top_k");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, MIS(1, 2), si, 16, 2, (float *)P(2), NULL), INV, "weights");
    CHECK_STATUS(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, P(1), si, 16, 2, (float *)P(2), NULL), INV, "compile-only");
    CHECK_STATUS(moejit_gather_weights(NULL, MOEJIT_DTYPE_FP32, (float *)P(1), si, 16, 2, P(2), NULL), INV, "context");
    CHECK_STATUS(moejit_gather_weights(c, (moejit_dtype_t)9, (float *)P(1), si, 16, 2, P(2), NULL), INV, "weight_dtype");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, NULL, si, 16, 2, P(2), NULL), INV, "d_w_s");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, (float *)P(1), NULL, 16, 2, P(2), NULL), INV, "scatter_index");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, (float *)P(1), si, 16, 2, NULL, NULL), INV, "d_weights");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, (float *)P(1), si, -1, 2, P(2), NULL), INV, "num_tokens");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, (float *)P(1), si, 16, 0, P(2), NULL), INV, "top_k");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, (float *)P(1), si, 16, 2, MIS(2, 2), NULL), INV, "d_weights");
    CHECK_STATUS(moejit_gather_weights(c, MOEJIT_DTYPE_FP32, (float *)P(1), si, 16, 2, P(2), NULL), INV, "compile-only");
}

/* ------------------------------------------------------------ struct_size rules, shared by
 * every call taking an argument struct: 0, an unreleased size, a newer header's with a set
 * tail byte, garbage. `call` is evaluated with the struct at `s` (of type T, in a buffer with
 * room for a newer tail). */
#define CHECK_STRUCT_SIZE(T, s, call, arg)                                        \
    do {                                                                          \
        const size_t keep_ = (s)->struct_size;                                   \
        (s)->struct_size = 0;                                                     \
        CHECK_STATUS(call, INV, arg "->struct_size");                            \
        (s)->struct_size = 16;                                                    \
        CHECK_STATUS(call, INV, arg "->struct_size");                            \
        (s)->struct_size = sizeof(T) - 4;                                         \
        CHECK_STATUS(call, INV, arg "->struct_size");                            \
        (s)->struct_size = 1u << 20;                                              \
        CHECK_STATUS(call, INV, arg "->struct_size");                            \
        (s)->struct_size = sizeof(T) + 16;                                        \
        ((unsigned char *)(s))[sizeof(T) + 9] = 1;                                \
        CHECK_STATUS(call, INV, arg "->struct_size");                            \
        ((unsigned char *)(s))[sizeof(T) + 9] = 0;                                \
        (s)->struct_size = keep_;                                                 \
    } while (0)

/* ------------------------------------------------------------ grouped GEMMs */
static void test_group_gemm(moejit_context_t c) {
    struct {
        moejit_group_gemm_nk_args_t a;
        unsigned char tail[16];
    } nkb;
    struct {
        moejit_group_gemm_mn_args_t a;
        unsigned char tail[16];
    } mnb;
    moejit_group_gemm_nk_args_t *nk = &nkb.a;
    moejit_group_gemm_mn_args_t *mn = &mnb.a;

    memset(&nkb, 0, sizeof nkb);
    moejit_group_gemm_nk_args_init(nk);
    nk->rows = 256, nk->n = 128, nk->k = 64, nk->num_experts = 4; /* the shape */
    nk->a = P(1), nk->b = P(2), nk->c = P(3);
    nk->offsets = (const int32_t *)P(4);
    CHECK_STATUS(moejit_group_gemm_same_nk(NULL, nk), INV, "context");
    CHECK_STATUS(moejit_group_gemm_same_nk(c, NULL), INV, "args");
    CHECK_STRUCT_SIZE(moejit_group_gemm_nk_args_t, nk, moejit_group_gemm_same_nk(c, nk), "args");
#define NK_CASE(field, bad, needle, st) CHECK_FIELD(*nk, field, bad, moejit_group_gemm_same_nk(c, nk), st, needle)
    NK_CASE(dtype, (moejit_dtype_t)0, "dtype", INV);
    NK_CASE(dtype, MOEJIT_DTYPE_FP32, "dtype", INV);
    NK_CASE(c_dtype, MOEJIT_DTYPE_INT32, "c_dtype", INV);
    NK_CASE(rows, -1, "rows", INV);
    NK_CASE(rows, INT64_MAX, "rows", INV);
    NK_CASE(n, 0, "n", INV);
    NK_CASE(n, -8, "n", INV);
    NK_CASE(n, 12, "n", INV);
    NK_CASE(k, 0, "k", INV);
    NK_CASE(k, INT64_MAX - 7, "k", UNS);
    NK_CASE(num_experts, 0, "num_experts", INV);
    NK_CASE(num_experts, INT32_MAX, "num_experts", UNS);
    NK_CASE(b_transposed, 2, "b_transposed", INV);
    NK_CASE(accumulate, -1, "accumulate", INV);
    NK_CASE(a, NULL, "a", INV);
    NK_CASE(b, NULL, "b", INV);
    NK_CASE(c, NULL, "c", INV);
    NK_CASE(offsets, NULL, "offsets", INV);
    NK_CASE(a, MIS(1, 8), "a", INV);
    NK_CASE(b, MIS(2, 2), "b", INV);
    NK_CASE(c, MIS(3, 2), "c", INV);
    NK_CASE(offsets, (const int32_t *)MIS(4, 2), "offsets", INV);
    CHECK_STATUS(moejit_group_gemm_same_nk(c, nk), INV, "compile-only");
#undef NK_CASE

    memset(&mnb, 0, sizeof mnb);
    moejit_group_gemm_mn_args_init(mn);
    mn->rows = 256, mn->m = 64, mn->n = 128, mn->num_experts = 4; /* the shape */
    mn->a = P(1), mn->b = P(2), mn->c = P(3);
    mn->offsets = (const int32_t *)P(4);
    CHECK_STATUS(moejit_group_gemm_same_mn(NULL, mn), INV, "context");
    CHECK_STATUS(moejit_group_gemm_same_mn(c, NULL), INV, "args");
    CHECK_STRUCT_SIZE(moejit_group_gemm_mn_args_t, mn, moejit_group_gemm_same_mn(c, mn), "args");
#define MN_CASE(field, bad, needle, st) CHECK_FIELD(*mn, field, bad, moejit_group_gemm_same_mn(c, mn), st, needle)
    MN_CASE(dtype, (moejit_dtype_t)-3, "dtype", INV);
    MN_CASE(c_dtype, MOEJIT_DTYPE_INT64, "c_dtype", INV);
    MN_CASE(rows, -1, "rows", INV);
    MN_CASE(m, 0, "m", INV);
    MN_CASE(n, 7, "n", INV);
    MN_CASE(num_experts, -4, "num_experts", INV);
    MN_CASE(accumulate, 3, "accumulate", INV);
    MN_CASE(a, NULL, "a", INV);
    MN_CASE(c, NULL, "c", INV);
    MN_CASE(offsets, NULL, "offsets", INV);
    MN_CASE(b, MIS(2, 4), "b", INV);
    CHECK_STATUS(moejit_group_gemm_same_mn(c, mn), INV, "compile-only");
#undef MN_CASE
}

/* ------------------------------------------------------------ SwiGLU */
static void test_swiglu(moejit_context_t c) {
    struct {
        moejit_swiglu_args_t a;
        unsigned char tail[16];
    } b;
    moejit_swiglu_args_t *s = &b.a;
    memset(&b, 0, sizeof b);
    moejit_swiglu_args_init(s);
    s->rows = 256;
    s->intermediate = 64;
    s->gate = P(1);
    s->up = P(2);
    s->a = P(3);
    s->daw = P(4);
    s->d_gate = P(5);
    s->d_up = P(6);
    CHECK_STATUS(moejit_swiglu_forward(NULL, s), INV, "context");
    CHECK_STATUS(moejit_swiglu_forward(c, NULL), INV, "args");
    CHECK_STATUS(moejit_swiglu_backward(c, NULL), INV, "args");
    CHECK_STRUCT_SIZE(moejit_swiglu_args_t, s, moejit_swiglu_forward(c, s), "args");
    CHECK_STRUCT_SIZE(moejit_swiglu_args_t, s, moejit_swiglu_backward(c, s), "args");
#define SW_CASE(fn, field, bad, needle, st) CHECK_FIELD(*s, field, bad, fn(c, s), st, needle)
    SW_CASE(moejit_swiglu_forward, dtype, (moejit_dtype_t)12, "dtype", INV);
    SW_CASE(moejit_swiglu_forward, rows, -1, "rows", INV);
    SW_CASE(moejit_swiglu_forward, rows, INT64_MAX, "rows", UNS);
    SW_CASE(moejit_swiglu_forward, intermediate, 0, "intermediate", INV);
    SW_CASE(moejit_swiglu_forward, intermediate, 9, "intermediate", INV);
    SW_CASE(moejit_swiglu_forward, intermediate, INT64_MAX - 7, "intermediate", UNS);
    SW_CASE(moejit_swiglu_forward, limit, 1.0f / 0.0f, "limit", INV);
    SW_CASE(moejit_swiglu_forward, gate, NULL, "gate", INV);
    SW_CASE(moejit_swiglu_forward, up, MIS(2, 2), "up", INV);
    SW_CASE(moejit_swiglu_forward, gate_up, P(7), "gate_up", INV);
    SW_CASE(moejit_swiglu_forward, a, NULL, "a", INV);
    SW_CASE(moejit_swiglu_forward, w_s, (const float *)MIS(8, 2), "w_s", INV);
    SW_CASE(moejit_swiglu_backward, daw, NULL, "daw", INV);
    SW_CASE(moejit_swiglu_backward, d_gate, MIS(5, 2), "d_gate", INV);
    SW_CASE(moejit_swiglu_backward, d_up, NULL, "d_up", INV);
    CHECK_STATUS(moejit_swiglu_forward(c, s), INV, "compile-only");
    CHECK_STATUS(moejit_swiglu_backward(c, s), INV, "compile-only");
#undef SW_CASE
}

/* ------------------------------------------------------------ the plan */
static void test_plan(moejit_context_t c) {
    struct {
        moejit_plan_desc_t d;
        unsigned char tail[16];
    } db;
    struct {
        moejit_forward_args_t a;
        unsigned char tail[16];
    } fb;
    struct {
        moejit_backward_args_t a;
        unsigned char tail[16];
    } bb;
    moejit_plan_desc_t *d = &db.d;
    moejit_plan_t plan = (moejit_plan_t)P(9);
    size_t bytes = 0;
    int kernels = 0;

    memset(&db, 0, sizeof db);
    layer_desc_init(d, 64, 64, 4, 2);

    CHECK_STATUS(moejit_plan_create(c, d, NULL), INV, "plan");
    CHECK_STATUS(moejit_plan_create(NULL, d, &plan), INV, "context");
    CHECK(plan == NULL); /* the out-pointer is cleared on failure */
    CHECK_STATUS(moejit_plan_create(c, NULL, &plan), INV, "desc");
    CHECK_STRUCT_SIZE(moejit_plan_desc_t, d, moejit_plan_create(c, d, &plan), "desc");
    CHECK_STATUS(moejit_plan_create(c, d, &plan), INV, "compile-only");
    moejit_plan_destroy(NULL);

    CHECK_STATUS(moejit_plan_warmup(NULL, d, &kernels), INV, "context");
    CHECK_STATUS(moejit_plan_warmup(c, NULL, &kernels), INV, "desc");
    CHECK_STRUCT_SIZE(moejit_plan_desc_t, d, moejit_plan_warmup(c, d, &kernels), "desc");
#define DESC_CASE(field, bad, needle, st) CHECK_FIELD(*d, field, bad, moejit_plan_warmup(c, d, &kernels), st, needle)
    DESC_CASE(dtype, MOEJIT_DTYPE_FP32, "desc->dtype", INV);
    DESC_CASE(dtype, (moejit_dtype_t)1000, "desc->dtype", INV);
    DESC_CASE(hidden_size, 0, "desc->hidden_size", INV);
    DESC_CASE(hidden_size, -64, "desc->hidden_size", INV);
    DESC_CASE(hidden_size, 65, "desc->hidden_size", INV);
    DESC_CASE(intermediate_size, -8, "desc->intermediate_size", INV);
    DESC_CASE(num_experts, 0, "desc->num_experts", INV);
    DESC_CASE(num_experts, 1 << 20, "desc->num_experts", INV);
    DESC_CASE(top_k, 0, "desc->top_k", INV);
    DESC_CASE(top_k, 65, "desc->top_k", INV);
    DESC_CASE(fc1_layout, (moejit_fc1_layout_t)7, "desc->fc1_layout", INV);
    DESC_CASE(activation, (moejit_activation_t)3, "desc->activation", INV);
    DESC_CASE(swiglu_limit, 0.0f / 0.0f, "desc->swiglu_limit", INV);
    DESC_CASE(weight_grad_dtype, MOEJIT_DTYPE_INT32, "desc->weight_grad_dtype", INV);
    DESC_CASE(weight_grad_accumulate, 1, "desc->weight_grad_accumulate", INV);
    DESC_CASE(index_dtype, MOEJIT_DTYPE_BF16, "desc->index_dtype", INV);
    DESC_CASE(routing_dtype, MOEJIT_DTYPE_INT64, "desc->routing_dtype", INV);
    DESC_CASE(tokens_hint, -1, "desc->tokens_hint", INV);
    /* Overflowing hints: T·k used to overflow int64 (UB) before anything checked it. */
    DESC_CASE(tokens_hint, INT64_MAX, "desc->tokens_hint", INV);
    DESC_CASE(tokens_hint, INT64_MAX / 2 + 1, "desc->tokens_hint", INV);
    DESC_CASE(tokens_hint, (int64_t)1 << 31, "desc->tokens_hint", INV);
#undef DESC_CASE

    /* Size queries and calls without a plan (a plan needs a device: tests/gpu). */
    CHECK_STATUS(moejit_plan_saved_size(NULL, 16, &bytes), INV, "plan");
    CHECK_STATUS(moejit_plan_workspace_size(NULL, 16, &bytes), INV, "plan");
    CHECK_STATUS(moejit_plan_consuming_workspace_size(NULL, 16, &bytes), INV, "plan");
    CHECK_STATUS(moejit_plan_backward_part_workspace_size(NULL, 16, MOEJIT_BACKWARD_PART_UP, &bytes), INV, "plan");
    CHECK_STATUS(moejit_plan_saved_size(NULL, -1, NULL), INV, "plan");

    memset(&fb, 0, sizeof fb);
    memset(&bb, 0, sizeof bb);
    moejit_forward_args_init(&fb.a);
    moejit_backward_args_init(&bb.a);
    CHECK_STATUS(moejit_plan_forward(NULL, NULL), INV, "args");
    CHECK_STATUS(moejit_plan_backward(NULL, NULL), INV, "args");
    CHECK_STATUS(moejit_plan_backward_part(NULL, MOEJIT_BACKWARD_PART_DOWN, NULL), INV, "args");
    CHECK_STRUCT_SIZE(moejit_forward_args_t, &fb.a, moejit_plan_forward(NULL, &fb.a), "args");
    CHECK_STRUCT_SIZE(moejit_backward_args_t, &bb.a, moejit_plan_backward(NULL, &bb.a), "args");
    CHECK_STATUS(moejit_plan_forward(NULL, &fb.a), INV, "plan");
    CHECK_STATUS(moejit_plan_backward(NULL, &bb.a), INV, "plan");
    /* A newer header's structs with every unknown field at its default (zero): accepted. */
    fb.a.struct_size = sizeof fb.a + 16;
    bb.a.struct_size = sizeof bb.a + 16;
    CHECK_STATUS(moejit_plan_forward(NULL, &fb.a), INV, "plan");
    CHECK_STATUS(moejit_plan_backward(NULL, &bb.a), INV, "plan");
    /* 0.1's backward struct (before x): accepted; with T > 0 it lacks x, named as such. */
    bb.a.struct_size = offsetof(moejit_backward_args_t, x);
    CHECK_STATUS(moejit_plan_backward(NULL, &bb.a), INV, "plan");
    bb.a.num_tokens = 3;
    CHECK_STATUS(moejit_plan_backward(NULL, &bb.a), INV, "args->x");
}

/* ------------------------------------------------------------ configuration (since 0.6) */
static void test_configuration(moejit_context_t c) {
    moejit_context_options_t o;
    moejit_context_t bad = NULL;
    moejit_plan_desc_t d;
    char buf[16];
    size_t need = 0;

    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.tune = 3;
    CHECK_STATUS(moejit_context_create(&o, &bad), INV, "options->tune");
    o.tune = MOEJIT_SWITCH_ON;
    o.gather = -1;
    CHECK_STATUS(moejit_context_create(&o, &bad), INV, "options->gather");
    o.gather = MOEJIT_SWITCH_OFF;
    o.fuse_swiglu = 9;
    CHECK_STATUS(moejit_context_create(&o, &bad), INV, "options->fuse_swiglu");
    o.fuse_swiglu = MOEJIT_SWITCH_ON;
    o.gemm_tile = "128x";
    CHECK_STATUS(moejit_context_create(&o, &bad), INV, "options->gemm_tile");
    CHECK(bad == NULL);
    o.gemm_tile = "";
    CHECK_STATUS(moejit_context_create(&o, &bad), OK, NULL);
    moejit_context_destroy(bad);

    layer_desc_init(&d, 256, 128, 4, 2);
    CHECK_STATUS(moejit_plan_describe(NULL, buf, sizeof buf, &need), INV, "plan");
    CHECK_STATUS(moejit_plan_describe_desc(NULL, &d, buf, sizeof buf, &need), INV, "context");
    CHECK_STATUS(moejit_plan_describe_desc(c, NULL, buf, sizeof buf, &need), INV, "desc");
    CHECK_STATUS(moejit_plan_describe_desc(c, &d, NULL, 4, &need), INV, "buf");
    memset(buf, GUARD, sizeof buf);
    CHECK_STATUS(moejit_plan_describe_desc(c, &d, buf, sizeof buf, &need), INV, "size");
    CHECK(need > sizeof buf && buf[sizeof buf - 1] == '\0' && strlen(buf) == sizeof buf - 1);
    d.top_k = 0;
    CHECK_STATUS(moejit_plan_describe_desc(c, &d, NULL, 0, &need), INV, "desc->top_k");
    d.top_k = 2;
    d.struct_size = 8;
    CHECK_STATUS(moejit_plan_describe_desc(c, &d, NULL, 0, &need), INV, "desc->struct_size");
    d.struct_size = sizeof d;
    CHECK_STATUS(moejit_plan_describe_desc(c, &d, NULL, 0, NULL), OK, NULL);
}

/* ------------------------------------------------------------ device error word (since 0.11) */
static void test_device_errors(moejit_context_t c) {
    uint32_t errors = 0xdeadu;
    CHECK_STATUS(moejit_context_device_errors(NULL, 1, &errors), INV, "context");
    CHECK_STATUS(moejit_context_device_errors(c, 0, NULL), INV, "errors");
    /* A compile-only context has no device word: none, without a driver. */
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL);
    CHECK(errors == 0);
    CHECK(MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS == 1);
}

int main(void) {
    moejit_context_t c;
    test_status_and_version();
    test_inits();
    test_context();
    c = compile_only_context();
    test_routing(c);
    test_group_gemm(c);
    test_swiglu(c);
    test_plan(c);
    test_configuration(c);
    test_device_errors(c);
    moejit_context_destroy(c);
    return c_check_result("bad_input");
}
