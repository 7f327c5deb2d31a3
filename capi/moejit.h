/*
 * moejit — JIT code-generating fused Mixture-of-Experts kernels.
 * The stable C ABI. Compiles on its own as C99 and as C++.
 *
 * Rules (see docs/DESIGN.md §5):
 *  - every fallible call returns moejit_status_t (0 = success) and writes results
 *    through out-pointers; on failure moejit_last_error() holds the calling thread's message;
 *  - status and enum values are ABI: explicit, append-only;
 *  - every argument struct starts with `size_t struct_size` and only grows (see "Argument
 *    structs" below); initialise it with the matching *_init() macro;
 *  - tensors are device pointers laid out row-major and contiguous, shaped as documented;
 *    the caller owns all memory; streams are CUstream passed as void*;
 *  - destroy functions accept NULL.
 *
 * Argument structs (the ABI rules; docs/DESIGN.md §5.2 has the reasoning):
 *  - Fields are only ever appended, never removed, reordered or retyped. A field added later
 *    takes its default when all its bytes are zero.
 *  - struct_size says which header the caller was built against. The library accepts the size
 *    of that struct in any released header, from the first (0.1.0) to its own; the fields past
 *    the caller's struct_size take their defaults (what *_init sets). 0, and a size up to the
 *    library's own that no header has, are MOEJIT_ERROR_INVALID_ARGUMENT naming
 *    `<arg>->struct_size`.
 *  - A struct_size larger than the library's (a header newer than the library) is accepted only
 *    when every byte past the library's struct is zero, i.e. every newer field is at its default;
 *    otherwise it is MOEJIT_ERROR_INVALID_ARGUMENT naming `<arg>->struct_size` and the first set
 *    byte. Sizes above 4096 are rejected as uninitialised.
 *  - Output structs (moejit_cache_stats_t) follow the same size rules; the library writes only
 *    the fields inside the caller's struct_size.
 *  - moejit_X_init(p) is a macro for moejit_X_init_sized(p, sizeof(moejit_X_t)): sizeof is taken
 *    in the caller's compilation unit, so the library never writes past the caller's struct.
 *    moejit_X_init_sized writes exactly struct_size bytes (defaults, then zero for fields the
 *    library does not know) and sets struct_size; a size that no header has writes nothing.
 *    The functions named moejit_X_init (declared before their macro) remain exported for
 *    binaries built against 0.1-0.3 headers and for bindings that cannot pass a size (take
 *    their address, or call (moejit_X_init)(p)): they write the struct as of 0.3.0, forever,
 *    except moejit_backward_args_init: 0.1-0.3 binaries reach it alike, with 152 bytes (0.1) or
 *    160 (0.2/0.3, x appended), so since 0.11 it writes the 152 bytes both have, never more,
 *    and sets struct_size to 153 (no header's size); moejit_plan_backward then reads those
 *    152 bytes, and x at offset 152 (the 0.2/0.3 layout) only when num_tokens > 0.
 *  - moejit_backward_args_t grew in 0.2.0 (x). A 0.1 struct_size is accepted, but backward with
 *    T > 0 needs x, so it is MOEJIT_ERROR_INVALID_ARGUMENT naming args->x.
 *
 * Binary compatibility: the soname is libmoejit.so.<ABI major> (libmoejit.so.0 today). Every
 * exported symbol is versioned (capi/moejit.map): MOEJIT_0.1 holds the 0.1 entry points,
 * MOEJIT_0.4 the *_init_sized functions, MOEJIT_0.6 the experts entry, MOEJIT_0.11
 * moejit_context_device_errors, the size-term queries and the FP8 weight cache's, MOEJIT_0.12
 * moejit_plan_consuming_workspace_size, MOEJIT_0.13 the backward's parts; a release that adds
 * functions adds a node. The ABI
 * major (and soname) is bumped, and the version nodes restart, when a binary built against an
 * earlier header of the same major could stop working: a removed or retyped function, a changed
 * enum or status value, a field removed, moved or retyped, a released struct_size no longer
 * accepted, or a call that valid older arguments can no longer satisfy. Adding functions, enum
 * values, statuses and trailing struct fields (defaulting to zero) keeps the soname.
 */
#ifndef MOEJIT_H
#define MOEJIT_H

#include <stddef.h>
#include <stdint.h>

#include "moejit_version.h"

#if defined(_WIN32)
#define MOEJIT_API __declspec(dllimport)
#elif defined(MOEJIT_BUILDING_LIBRARY)
#define MOEJIT_API __attribute__((visibility("default")))
#else
#define MOEJIT_API
#endif

/* The enums' underlying type is int in C++ too (as in C, where an enum object holds any int):
 * a C caller may pass any value, and the library rejects unknown ones as
 * MOEJIT_ERROR_INVALID_ARGUMENT; without a fixed type such values would be undefined behaviour
 * in C++. Needs C++11 or later. */
#ifdef __cplusplus
#define MOEJIT_ENUM(name) enum name : int
#else
#define MOEJIT_ENUM(name) enum name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

typedef MOEJIT_ENUM(moejit_status) {
    MOEJIT_SUCCESS = 0,
    MOEJIT_ERROR_INVALID_ARGUMENT = 1, /* a bad value; the message names the argument */
    MOEJIT_ERROR_UNSUPPORTED = 2,      /* valid but not implemented (shape, dtype, arch) */
    MOEJIT_ERROR_OUT_OF_MEMORY = 3,    /* host allocation failed */
    MOEJIT_ERROR_NO_DRIVER = 4,        /* libcuda.so.1 could not be loaded */
    MOEJIT_ERROR_NO_DEVICE = 5,        /* driver present, no (such) CUDA device */
    MOEJIT_ERROR_CUDA = 6,             /* a driver call failed; the message names it */
    MOEJIT_ERROR_COMPILE = 7,          /* NVRTC failed; the message holds its log */
    MOEJIT_ERROR_JIT_DISABLED = 8,     /* cache miss with compilation switched off */
    MOEJIT_ERROR_CACHE = 9,            /* reserved: cache problems degrade, they do not fail */
    MOEJIT_ERROR_INTERNAL = 10         /* a bug in moejit; please report */
} moejit_status_t;

/* Static, never NULL ("unknown status" for values this version does not know). */
MOEJIT_API const char *moejit_status_string(moejit_status_t status);
/* The calling thread's last error message ("" if none). Valid until the next moejit call. */
MOEJIT_API const char *moejit_last_error(void);

/* Run-time version, to detect a header/library mismatch. */
MOEJIT_API const char *moejit_version(void);
/* MOEJIT_VERSION_MAJOR * 10000 + MINOR * 100 + PATCH */
MOEJIT_API int moejit_version_number(void);

/* ---------------------------------------------------------------- types */

typedef MOEJIT_ENUM(moejit_dtype) {
    MOEJIT_DTYPE_BF16 = 1,
    MOEJIT_DTYPE_FP16 = 2,
    MOEJIT_DTYPE_FP32 = 3,
    MOEJIT_DTYPE_INT32 = 4,
    MOEJIT_DTYPE_INT64 = 5
} moejit_dtype_t;

typedef struct moejit_context_s *moejit_context_t;
typedef struct moejit_plan_s *moejit_plan_t;

typedef MOEJIT_ENUM(moejit_log_level) {
    MOEJIT_LOG_DEBUG = 0,
    MOEJIT_LOG_INFO = 1,
    MOEJIT_LOG_WARNING = 2,
    MOEJIT_LOG_ERROR = 3
} moejit_log_level_t;

typedef void (*moejit_log_fn)(moejit_log_level_t level, const char *message, void *user_data);

typedef MOEJIT_ENUM(moejit_jit_mode) {
    MOEJIT_JIT_FROM_ENV = 0, /* on, unless MOEJIT_COMPILE=off (or 0/false/no) */
    MOEJIT_JIT_ON = 1,
    MOEJIT_JIT_OFF = 2       /* a cache miss returns MOEJIT_ERROR_JIT_DISABLED */
} moejit_jit_mode_t;

/* ---------------------------------------------------------------- context */

typedef struct moejit_context_options {
    size_t struct_size;
    /* Disk cache root. NULL: $MOEJIT_CACHE_DIR, else $XDG_CACHE_HOME/moejit, else ~/.cache/moejit.
     * "" disables the disk cache (memory only). The library version is appended as a sub-folder. */
    const char *cache_dir;
    /* Target arch, e.g. "sm_90a", "sm_80". NULL: the device's own (sm_90a on Hopper). On a
     * device context an arch whose cubins cannot load there is MOEJIT_ERROR_UNSUPPORTED. */
    const char *arch;
    /* CUDA device ordinal (ignored by compile-only contexts). */
    int device_ordinal;
    /* A moejit_jit_mode_t. */
    int jit_mode;
    /* Non-zero: never touch the driver; kernels are compiled and cached but not loaded, so it
     * works on a machine without a GPU. Requires `arch`. Launching ops on it is an error. */
    int compile_only;
    /* Receives warnings (e.g. an unwritable cache folder) and compile logs. NULL: silent. */
    moejit_log_fn log_fn;
    void *log_user_data;
    /* ---- since 0.6: the behaviour switches as data ("configuration" below). Each takes its
     * value from, in order: this field when set, else its environment variable (read when the
     * context is created), else the built-in default. Zero (what *_init sets) = not set. */
    int32_t tune;        /* a moejit_switch_t; $MOEJIT_TUNE; default off: time candidate tiles
                            at each grouped-GEMM problem's first call, keep the fastest */
    int32_t gather;      /* a moejit_switch_t; $MOEJIT_GATHER; default: on where I <= 2048 on
                            the wgmma engine. fc1 reads x's rows instead of their scatter */
    int32_t fuse_swiglu; /* a moejit_switch_t; $MOEJIT_FUSE_SWIGLU; default off: SwiGLU in
                            fc1's epilogue (wgmma engine, plain SwiGLU, [E,N,K], no bias) */
    /* Force this tile (e.g. "wgmma_128x256x64_s3_g8_e1"; "_p1" appended: ping-pong
     * consumers) for every grouped GEMM of the context: tests and experiments. NULL:
     * $MOEJIT_GEMM_TILE, else the heuristic; "": the heuristic, whatever the environment
     * says. A forced tile turns tuning off. */
    const char *gemm_tile;
} moejit_context_options_t;

MOEJIT_API moejit_status_t moejit_context_options_init(moejit_context_options_t *options);
MOEJIT_API moejit_status_t moejit_context_options_init_sized(moejit_context_options_t *options, size_t struct_size);
#define moejit_context_options_init(options) moejit_context_options_init_sized((options), sizeof(moejit_context_options_t))
/* options may be NULL (all defaults). Without compile_only, needs a driver and a device: the
 * device's primary context is retained and used by every call made with this moejit context. */
MOEJIT_API moejit_status_t moejit_context_create(const moejit_context_options_t *options,
                                                 moejit_context_t *context);
MOEJIT_API void moejit_context_destroy(moejit_context_t context);

/* The arch kernels are compiled for (e.g. "sm_90a"); owned by the context. */
MOEJIT_API moejit_status_t moejit_context_arch(moejit_context_t context, const char **arch);
/* The disk cache folder in use ("" when memory only); owned by the context. */
MOEJIT_API moejit_status_t moejit_context_cache_dir(moejit_context_t context, const char **dir);

typedef struct moejit_cache_stats {
    size_t struct_size;
    uint64_t memory_hits;      /* served from this context's loaded kernels */
    uint64_t disk_hits;        /* loaded from a valid disk entry */
    uint64_t misses;           /* not found in memory or on disk */
    uint64_t compiles;         /* successful NVRTC compilations */
    uint64_t compile_failures; /* NVRTC failures */
    uint64_t disk_rejects;     /* disk entries found invalid, removed and rebuilt */
    double compile_seconds;    /* total NVRTC wall time */
    double disk_load_seconds;  /* total time reading + validating disk hits */
} moejit_cache_stats_t;

MOEJIT_API moejit_status_t moejit_cache_stats_init(moejit_cache_stats_t *stats);
MOEJIT_API moejit_status_t moejit_cache_stats_init_sized(moejit_cache_stats_t *stats, size_t struct_size);
#define moejit_cache_stats_init(stats) moejit_cache_stats_init_sized((stats), sizeof(moejit_cache_stats_t))
MOEJIT_API moejit_status_t moejit_context_cache_stats(moejit_context_t context,
                                                      moejit_cache_stats_t *stats);

/* NVRTC version as major * 100 + minor. */
MOEJIT_API moejit_status_t moejit_nvrtc_version(int *version);

/* ---------------------------------------------------------------- device data errors (since 0.11)
 * Device-resident indices that the library reads from the caller and cannot check on the host
 * without a synchronisation are bounded on the device: data that would make a kernel read or
 * write out of bounds is clamped as each entry point documents (its results are then defined:
 * zero where the data assigned a row nowhere), and the kernel sets a bit in the context's
 * device error word instead of faulting. The word is the context's, shared by its plans and
 * streams, and stays set until cleared. What each entry point bounds:
 *  - moejit_plan_experts_forward/backward: expert_offsets (MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS);
 *  - routing ids outside [0, E) are dropped routes by contract (moejit_routing_index), and a
 *    scatter_index outside [0, S) is skipped or read as zero (moejit_scatter, moejit_gather, ...):
 *    both are legal data, so neither sets a bit;
 *  - the layer (moejit_plan_forward/backward) reads only indices it computed itself;
 *  - moejit_group_gemm_same_nk/same_mn still trust their offsets (well-formed by contract).
 * moejit_context_device_errors synchronises the context (every stream's work so far, a host
 * synchronisation: call it when convenient, e.g. once per step), then writes the word into
 * *errors, a mask of moejit_device_error_t values (0: none), and zeroes it when clear is
 * non-zero. A compile-only context has no word: *errors = 0. */
typedef MOEJIT_ENUM(moejit_device_error) {
    MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS = 1 /* expert_offsets not [0, non-decreasing, <= R] */
} moejit_device_error_t;
MOEJIT_API moejit_status_t moejit_context_device_errors(moejit_context_t context, int clear, uint32_t *errors);

/* ---------------------------------------------------------------- configuration (since 0.6)
 * The switches of moejit_context_options_t (tune, gather, fuse_swiglu; gemm_tile is text) and
 * what a plan made of them. Precedence, per switch: an explicit option > its MOEJIT_*
 * environment variable > the built-in default. The environment is read once, when a context is
 * created, and every MOEJIT_* variable is validated then, set option or not (a bad value is
 * MOEJIT_ERROR_INVALID_ARGUMENT naming the variable); a context never changes its configuration.
 */
typedef MOEJIT_ENUM(moejit_switch) {
    MOEJIT_SWITCH_FROM_ENV = 0, /* the environment variable, else the built-in default */
    MOEJIT_SWITCH_ON = 1,
    MOEJIT_SWITCH_OFF = 2
} moejit_switch_t;

struct moejit_plan_desc; /* moejit_plan_desc_t, below */

/* The configuration `plan` resolved, as text: "key=value" lines, each ending in '\n':
 *   arch=sm_90a
 *   jit=on|off                    jit_from=option|environment|default
 *   tune=on|off                   tune_from=...         (off while a tile is forced)
 *   gather=on|off                 gather_from=...
 *   fuse_swiglu=on|off            fuse_swiglu_from=...
 *   gemm_tile=<tile>|heuristic    gemm_tile_from=...
 *   tile_<role>=<tile>            one per grouped GEMM the plan runs: fc1, fc2, fc2_dgrad,
 *                                 fc1_dgrad, fc1_dgrad_acc (split fc1 without the one-GEMM
 *                                 dgrad only), fc2_wgrad, fc1_wgrad
 * gather and fuse_swiglu say what the plan does: a request it cannot honour (gather off the
 * wgmma engine; the SwiGLU epilogue with another activation, interleaved or transposed weights
 * or biases) reads off, its _from still "option". Keys are only ever added.
 * Writes at most `size` bytes, NUL included, into buf (NULL when size is 0); *required (may be
 * NULL) receives the size the whole text needs, NUL included. A size below that is
 * MOEJIT_ERROR_INVALID_ARGUMENT naming `size`, with buf holding the truncated, NUL-terminated
 * text. */
MOEJIT_API moejit_status_t moejit_plan_describe(moejit_plan_t plan, char *buf, size_t size, size_t *required);
/* The same text for the plan that `desc` would make on `context`, without making it (compiles
 * nothing; works on a compile-only context): what moejit_plan_warmup and moejit-warmup warm. */
MOEJIT_API moejit_status_t moejit_plan_describe_desc(moejit_context_t context, const struct moejit_plan_desc *desc,
                                                     char *buf, size_t size, size_t *required);
/* ---------------------------------------------------------------- end of configuration */

/* ---------------------------------------------------------------- routing ops
 * S = T * k scattered rows. Expert ids: int32 or int64, values in [0, E).
 * counts [E] int32, offsets [E+1] int32 (exclusive prefix sum, offsets[E] = S),
 * scatter_index [T,k] int32: offsets[e] + stable rank of (t,j) among routes to e in row-major
 * order. Duplicate routes are legal. No host synchronisation.
 * An id outside [0, E) (e.g. -1 for a dropped route) is not counted: its scatter_index is -1,
 * which scatter and scatter_weights skip and gather and gather_weights treat as zero, and
 * offsets[E] is then the number of valid routes. The workspace needs no initialisation.
 * T = 0 writes zero counts and offsets; tensors with no elements may be NULL.
 */
MOEJIT_API moejit_status_t moejit_routing_index_workspace_size(int64_t num_tokens, int32_t top_k,
                                                               int32_t num_experts,
                                                               size_t *bytes);
MOEJIT_API moejit_status_t moejit_routing_index(moejit_context_t context,
                                                moejit_dtype_t index_dtype,
                                                const void *selected_experts, int64_t num_tokens,
                                                int32_t top_k, int32_t num_experts,
                                                int32_t *counts, int32_t *offsets,
                                                int32_t *scatter_index, void *workspace,
                                                size_t workspace_size, void *stream);

/* xs[scatter_index[t,j], :] = x[t, :]; x [T,H], xs [S,H], dtype bf16 or fp16. */
MOEJIT_API moejit_status_t moejit_scatter(moejit_context_t context, moejit_dtype_t dtype,
                                          const void *x, const int32_t *scatter_index,
                                          int64_t num_tokens, int32_t top_k,
                                          int64_t hidden_size, void *xs, void *stream);

/* out[t, :] = sum_j w[t,j] * ys[scatter_index[t,j], :], fp32 accumulation in j order.
 * ys [S,H], out [T,H] in dtype; weights [T,k] in weight_dtype (dtype or FP32), or NULL for 1. */
MOEJIT_API moejit_status_t moejit_gather(moejit_context_t context, moejit_dtype_t dtype,
                                         const void *ys, const int32_t *scatter_index,
                                         const void *weights, moejit_dtype_t weight_dtype,
                                         int64_t num_tokens, int32_t top_k, int64_t hidden_size,
                                         void *out, void *stream);

/* w_s[scatter_index[t,j]] = weights[t,j] as fp32; weights [T,k] in weight_dtype (bf16/fp16/fp32). */
MOEJIT_API moejit_status_t moejit_scatter_weights(moejit_context_t context,
                                                  moejit_dtype_t weight_dtype, const void *weights,
                                                  const int32_t *scatter_index, int64_t num_tokens,
                                                  int32_t top_k, float *w_s, void *stream);
/* d_weights[t,j] = d_w_s[scatter_index[t,j]], written in weight_dtype. */
MOEJIT_API moejit_status_t moejit_gather_weights(moejit_context_t context,
                                                 moejit_dtype_t weight_dtype, const float *d_w_s,
                                                 const int32_t *scatter_index, int64_t num_tokens,
                                                 int32_t top_k, void *d_weights, void *stream);

/* ---------------------------------------------------------------- grouped GEMMs
 * Expert e owns rows [offsets[e], offsets[e+1]) of the scattered operands. The number of rows
 * (`rows`, = S) is the scattered tensor's size: launch bounds come from it, never from T.
 */
typedef struct moejit_group_gemm_nk_args {
    size_t struct_size;
    moejit_dtype_t dtype;   /* A and B: bf16 or fp16 */
    moejit_dtype_t c_dtype; /* dtype or FP32 */
    int64_t rows;           /* S, rows of A and C */
    int64_t n;
    int64_t k;
    int32_t num_experts;
    /* 1: B is [E,N,K] and C_e = A_e · B_eᵀ (forward); 0: B is [E,K,N] and C_e = A_e · B_e. */
    int32_t b_transposed;
    int32_t accumulate; /* 1: C += result (C read in c_dtype) */
    const void *a;      /* [S,K] */
    const void *b;
    void *c;            /* [S,N] */
    const int32_t *offsets; /* [E+1] */
    void *stream;
} moejit_group_gemm_nk_args_t;

typedef struct moejit_group_gemm_mn_args {
    size_t struct_size;
    moejit_dtype_t dtype;   /* A and B: bf16 or fp16 */
    moejit_dtype_t c_dtype; /* dtype or FP32 */
    int64_t rows;           /* S */
    int64_t m;
    int64_t n;
    int32_t num_experts;
    int32_t accumulate; /* 1: C += result, requires c_dtype FP32; empty experts left untouched */
    const void *a;      /* [S,M] */
    const void *b;      /* [S,N] */
    void *c;            /* [E,M,N]: C_e = A_eᵀ · B_e; an expert with no rows gets exactly 0 */
    const int32_t *offsets; /* [E+1] */
    void *stream;
} moejit_group_gemm_mn_args_t;

MOEJIT_API moejit_status_t moejit_group_gemm_nk_args_init(moejit_group_gemm_nk_args_t *args);
MOEJIT_API moejit_status_t moejit_group_gemm_nk_args_init_sized(moejit_group_gemm_nk_args_t *args, size_t struct_size);
#define moejit_group_gemm_nk_args_init(args) moejit_group_gemm_nk_args_init_sized((args), sizeof(moejit_group_gemm_nk_args_t))
MOEJIT_API moejit_status_t moejit_group_gemm_mn_args_init(moejit_group_gemm_mn_args_t *args);
MOEJIT_API moejit_status_t moejit_group_gemm_mn_args_init_sized(moejit_group_gemm_mn_args_t *args, size_t struct_size);
#define moejit_group_gemm_mn_args_init(args) moejit_group_gemm_mn_args_init_sized((args), sizeof(moejit_group_gemm_mn_args_t))
MOEJIT_API moejit_status_t moejit_group_gemm_same_nk(moejit_context_t context,
                                                     const moejit_group_gemm_nk_args_t *args);
MOEJIT_API moejit_status_t moejit_group_gemm_same_mn(moejit_context_t context,
                                                     const moejit_group_gemm_mn_args_t *args);

/* ---------------------------------------------------------------- SwiGLU
 * Split layout: gate and up are separate [S,I] tensors. Merged: one [S,2I] tensor, gate in
 * columns [0,I), up in [I,2I). limit > 0 enables g' = min(g,L), u' = clamp(u,-L,L).
 */
typedef struct moejit_swiglu_args {
    size_t struct_size;
    moejit_dtype_t dtype;
    int64_t rows;         /* S */
    int64_t intermediate; /* I */
    int32_t merged;
    float limit;          /* <= 0: no limit */
    const void *gate;     /* split: [S,I] */
    const void *up;       /* split: [S,I] */
    const void *gate_up;  /* merged: [S,2I] */
    const float *w_s;     /* [S] per-row routing weight, or NULL for 1 */
    /* forward */
    void *a;              /* [S,I] silu(g')·u' (may be NULL) */
    void *aw;             /* [S,I] a·w_s (may be NULL) */
    /* backward */
    const void *daw;      /* [S,I] */
    void *d_gate;         /* split: [S,I] */
    void *d_up;           /* split: [S,I] */
    void *d_gate_up;      /* merged: [S,2I] */
    float *d_w_s;         /* [S] sum_i a·daw (may be NULL) */
    void *stream;
} moejit_swiglu_args_t;

MOEJIT_API moejit_status_t moejit_swiglu_args_init(moejit_swiglu_args_t *args);
MOEJIT_API moejit_status_t moejit_swiglu_args_init_sized(moejit_swiglu_args_t *args, size_t struct_size);
#define moejit_swiglu_args_init(args) moejit_swiglu_args_init_sized((args), sizeof(moejit_swiglu_args_t))
MOEJIT_API moejit_status_t moejit_swiglu_forward(moejit_context_t context,
                                                 const moejit_swiglu_args_t *args);
MOEJIT_API moejit_status_t moejit_swiglu_backward(moejit_context_t context,
                                                  const moejit_swiglu_args_t *args);

/* ---------------------------------------------------------------- the MoE layer */

/* fc1's output columns (the rows of W_gate_up, or its columns when weights_transposed) and
 * the saved gate_up activations follow the layout. */
typedef MOEJIT_ENUM(moejit_fc1_layout) {
    MOEJIT_FC1_SPLIT = 0,      /* W_gate [E,I,H], W_up [E,I,H] */
    MOEJIT_FC1_MERGED = 1,     /* W_gate_up [E,2I,H], gate rows first, then up (Qwen, Mixtral,
                                  OLMoE, DeepSeek in transformers) */
    MOEJIT_FC1_INTERLEAVED = 2 /* W_gate_up [E,2I,H] with column 2i = gate i, 2i+1 = up i
                                  (gpt-oss). Since 0.5. */
} moejit_fc1_layout_t;

/* g, u: fc1's gate and up outputs (plus the fc1 bias when has_bias); L = swiglu_limit.
 * With L > 0: g' = min(g, L), u' = clamp(u, -L, L); else g' = g, u' = u. Gradients pass where
 * g <= L and -L <= u <= L (inclusive, as torch.clamp's backward). */
typedef MOEJIT_ENUM(moejit_activation) {
    MOEJIT_ACTIVATION_SWIGLU = 0, /* h = silu(g')·u' */
    MOEJIT_ACTIVATION_GPT_OSS = 1 /* h = (u' + 1)·g'·sigmoid(alpha·g'), alpha = activation_alpha
                                     (gpt-oss: alpha 1.702, L 7). Since 0.5. */
} moejit_activation_t;

/* The layer's numeric recipe (since 0.11). A struct_size from an older header (no `recipe`)
 * means MOEJIT_RECIPE_BF16. */
typedef MOEJIT_ENUM(moejit_recipe) {
    MOEJIT_RECIPE_BF16 = 0,      /* every GEMM in the layer dtype (bf16 or fp16), fp32 accumulation */
    MOEJIT_RECIPE_FP8_BLOCK = 1  /* DeepSeek-V3-style FP8: every GEMM (forward, input and weight
                                    gradients) in e4m3 with fp32 block scales (activations per
                                    1x128 row tile, weight-gradient operands per 128x1 tile,
                                    weights per 128x128 block) and fp32 promotion; SwiGLU, routing
                                    and the gathers in bf16. The saved activations are kept in
                                    e4m3 + scales (about half the bf16 bytes). Needs an sm_90a
                                    context, dtype bf16, hidden_size and intermediate_size
                                    multiples of 128, no weights_transposed and no has_bias. Each
                                    call quantizes the weights it reads, unless the caller keeps
                                    them in a weight cache (moejit_weight_cache_mode_t). The
                                    experts entry has no FP8 form (MOEJIT_ERROR_UNSUPPORTED). */
} moejit_recipe_t;

/* What a call of an MOEJIT_RECIPE_FP8_BLOCK plan does with the caller's weight cache,
 * args->weight_cache (since 0.11): a device buffer of moejit_plan_weight_cache_size bytes that
 * holds the weights quantized in both layouts the GEMMs read (forward's and the transposed one
 * of the input gradients), kept by the caller between calls, so that weights which did not
 * change since the last FILL (the micro-batches of one optimizer step) are not read and
 * quantized again. The library never decides by itself that weights are unchanged. */
typedef MOEJIT_ENUM(moejit_weight_cache_mode) {
    MOEJIT_WEIGHT_CACHE_NONE = 0, /* no cache (the default): the call quantizes the weights it reads
                                     into its workspace */
    MOEJIT_WEIGHT_CACHE_FILL = 1, /* quantize this call's weights into the cache, both layouts,
                                     then run from it (T = 0 included) */
    MOEJIT_WEIGHT_CACHE_USE = 2   /* run from the cache as the last FILL left it, quantizing no
                                     weight: the caller guarantees the weights are that FILL's,
                                     unchanged (otherwise the results use the old weights) */
} moejit_weight_cache_mode_t;

typedef struct moejit_plan_desc {
    size_t struct_size;
    moejit_dtype_t dtype;           /* x, weights, out: bf16 or fp16 */
    int64_t hidden_size;            /* H */
    int64_t intermediate_size;      /* I */
    int32_t num_experts;            /* E */
    int32_t top_k;                  /* k */
    moejit_fc1_layout_t fc1_layout;
    moejit_activation_t activation;
    float swiglu_limit;             /* <= 0: none */
    moejit_dtype_t weight_grad_dtype; /* dtype or FP32 */
    int32_t weight_grad_accumulate; /* 1: dW += grad (requires FP32) */
    moejit_dtype_t index_dtype;     /* selected_experts: INT32 or INT64 */
    moejit_dtype_t routing_dtype;   /* routing_weights and d_routing_weights: dtype or FP32 */
    int64_t tokens_hint;            /* typical T, guides tile choice; 0: default */
    /* ---- since 0.5 (zero = the 0.4 behaviour) */
    float activation_alpha;         /* MOEJIT_ACTIVATION_GPT_OSS's alpha; 0: 1.702 */
    /* 1: the weights are stored for x·W (gpt-oss): W_gate_up [E,H,2I], W_down [E,I,H], and their
     * gradients in the same layout. MERGED or INTERLEAVED fc1 only. 0: [E,2I,H] and [E,H,I]. */
    int32_t weights_transposed;
    /* 1: fc1 adds b_gate_up [E,2I] (columns in fc1's order) and fc2 adds b_down [E,H], each
     * expert its own row; the routing weight multiplies fc2's output including its bias:
     * out[t] = sum_j w[t,j]·(fc2(h) + b_down[e]). MERGED or INTERLEAVED fc1 only. */
    int32_t has_bias;
    /* ---- since 0.11 (zero = the 0.10 behaviour: bf16 everywhere) */
    int32_t reserved_0_5_tail;      /* the 0.5 struct's tail padding, named: ignored (a 0.5-0.10
                                       caller may leave any value here) */
    moejit_recipe_t recipe;         /* the GEMMs' number format; MOEJIT_RECIPE_BF16 by default */
    /* ---- since 0.14 (0.11-0.13: reserved0, "must be 0"; a library before 0.14 ignores it)
     * 1: the caller passes routing_weights to every backward call of the plan (moejit_plan_backward
     * and DOWN, moejit_plan_backward_part), as moejit_backward_args_t asks, so a bf16 plan keeps
     * no copy of them in `saved` (S fp32 fewer: the backward scatters them again). 0 (the
     * default, the 0.13 behaviour): saved keeps them, and the backward does not read them. An
     * FP8 plan keeps its own either way. Anything else: MOEJIT_ERROR_INVALID_ARGUMENT. */
    int32_t routing_weights_in_backward;
} moejit_plan_desc_t;

typedef struct moejit_forward_args {
    size_t struct_size;
    int64_t num_tokens; /* T >= 0 */
    const void *x;                /* [T,H] */
    const void *selected_experts; /* [T,k] */
    const void *routing_weights;  /* [T,k] */
    const void *w_gate;           /* split */
    const void *w_up;             /* split */
    const void *w_gate_up;        /* merged */
    const void *w_down;           /* [E,H,I] */
    void *out;                    /* [T,H] */
    void *saved;                  /* moejit_plan_saved_size bytes, kept for backward */
    size_t saved_size;
    void *workspace;              /* moejit_plan_consuming_workspace_size bytes (since 0.12;
                                     0.11 asked for moejit_plan_workspace_size, which is at
                                     least that), scratch */
    size_t workspace_size;
    void *stream;
    /* ---- since 0.5 */
    const void *b_gate_up;        /* has_bias: [E,2I] in dtype */
    const void *b_down;           /* has_bias: [E,H] in dtype */
    /* ---- since 0.11, MOEJIT_RECIPE_FP8_BLOCK plans only (a bf16 plan refuses a mode other than
     * NONE). With FILL or USE the workspace needs moejit_plan_cached_workspace_size bytes. */
    void *weight_cache;           /* moejit_plan_weight_cache_size bytes, 16-byte aligned */
    size_t weight_cache_size;
    moejit_weight_cache_mode_t weight_cache_mode;
    int32_t reserved_0_11;        /* must be 0 */
} moejit_forward_args_t;

typedef struct moejit_backward_args {
    size_t struct_size;
    int64_t num_tokens;
    const void *dout;             /* [T,H] */
    const void *routing_weights;  /* [T,k], as in forward; read by a bf16 plan made with
                                     desc->routing_weights_in_backward = 1 (since 0.14), and
                                     then required for T > 0 (whole backward and DOWN) */
    const void *w_gate;
    const void *w_up;
    const void *w_gate_up;
    const void *w_down;
    const void *saved;            /* written by the forward call; a consuming call (consume_saved,
                                     below) writes over it */
    size_t saved_size;
    void *dx;                     /* [T,H] */
    void *d_routing_weights;      /* [T,k] in routing_dtype */
    void *dw_gate;                /* split, [E,I,H] in weight_grad_dtype */
    void *dw_up;
    void *dw_gate_up;             /* merged, [E,2I,H] */
    void *dw_down;                /* [E,H,I] */
    void *workspace;
    size_t workspace_size;
    void *stream;
    const void *x;                /* [T,H], the forward's input (since 0.2: the layer re-reads
                                     x's rows instead of saving their [S,H] scatter) */
    /* ---- since 0.5, has_bias only */
    const void *b_down;           /* [E,H], as in forward (d_routing_weights needs it) */
    void *db_gate_up;             /* [E,2I] in weight_grad_dtype: per-expert sums over its rows,
                                     fp32, fixed order (deterministic); += when accumulating */
    void *db_down;                /* [E,H] likewise */
    /* ---- since 0.11, as in moejit_forward_args_t (FILL reads the weights even when T = 0) */
    void *weight_cache;
    size_t weight_cache_size;
    moejit_weight_cache_mode_t weight_cache_mode;
    /* since 0.12 (0.11: reserved, 0). 1: the call may write over `saved` (a bf16 plan writes
     * the SwiGLU gradient over the saved g and u), which is spent afterwards: a second backward
     * needs a new forward. The workspace then needs only moejit_plan_consuming_workspace_size
     * bytes (S*2I elements fewer at the step's peak). 0: saved is only read. An FP8 plan writes
     * nothing of saved either way. */
    int32_t consume_saved;
} moejit_backward_args_t;

MOEJIT_API moejit_status_t moejit_plan_desc_init(moejit_plan_desc_t *desc);
MOEJIT_API moejit_status_t moejit_plan_desc_init_sized(moejit_plan_desc_t *desc, size_t struct_size);
#define moejit_plan_desc_init(desc) moejit_plan_desc_init_sized((desc), sizeof(moejit_plan_desc_t))
MOEJIT_API moejit_status_t moejit_forward_args_init(moejit_forward_args_t *args);
MOEJIT_API moejit_status_t moejit_forward_args_init_sized(moejit_forward_args_t *args, size_t struct_size);
#define moejit_forward_args_init(args) moejit_forward_args_init_sized((args), sizeof(moejit_forward_args_t))
MOEJIT_API moejit_status_t moejit_backward_args_init(moejit_backward_args_t *args);
MOEJIT_API moejit_status_t moejit_backward_args_init_sized(moejit_backward_args_t *args, size_t struct_size);
#define moejit_backward_args_init(args) moejit_backward_args_init_sized((args), sizeof(moejit_backward_args_t))

/* Selects and JIT-compiles (or loads) every kernel the layer needs. */
MOEJIT_API moejit_status_t moejit_plan_create(moejit_context_t context,
                                              const moejit_plan_desc_t *desc,
                                              moejit_plan_t *plan);
MOEJIT_API void moejit_plan_destroy(moejit_plan_t plan);
/* Compiles every kernel of the plan into the cache without loading or launching anything;
 * works on a compile-only context. *kernels (may be NULL) receives how many it needed. */
MOEJIT_API moejit_status_t moejit_plan_warmup(moejit_context_t context,
                                              const moejit_plan_desc_t *desc, int *kernels);
/* Sizes for T = num_tokens, validated as forward and backward validate args->num_tokens
 * (T >= 0, T * top_k <= 2^31-1, no size overflows): else MOEJIT_ERROR_INVALID_ARGUMENT naming
 * num_tokens. */
MOEJIT_API moejit_status_t moejit_plan_saved_size(moejit_plan_t plan, int64_t num_tokens,
                                                  size_t *bytes);
MOEJIT_API moejit_status_t moejit_plan_workspace_size(moejit_plan_t plan, int64_t num_tokens,
                                                      size_t *bytes);
/* The workspace of a forward call and of a backward call with consume_saved = 1 (since 0.12):
 * at most moejit_plan_workspace_size, which a backward that keeps saved needs (for an FP8 plan
 * the two are equal). */
MOEJIT_API moejit_status_t moejit_plan_consuming_workspace_size(moejit_plan_t plan, int64_t num_tokens,
                                                                size_t *bytes);
/* An MOEJIT_RECIPE_FP8_BLOCK plan's weight cache (since 0.11): its bytes (they depend on the
 * descriptor only), and the workspace a call with weight_cache_mode FILL or USE needs for T =
 * num_tokens (moejit_plan_workspace_size less the weights' regions, which the cache replaces).
 * A bf16 plan: MOEJIT_ERROR_UNSUPPORTED. */
MOEJIT_API moejit_status_t moejit_plan_weight_cache_size(moejit_plan_t plan, size_t *bytes);
MOEJIT_API moejit_status_t moejit_plan_cached_workspace_size(moejit_plan_t plan, int64_t num_tokens,
                                                             size_t *bytes);
/* An affine bound of moejit_plan_saved_size from the descriptor alone (no context, no device;
 * since 0.11): for every plan of *desc and every valid T,
 *   moejit_plan_saved_size(plan, T) <= *bytes_per_token * T + *constant_bytes.
 * For frameworks that size `saved` symbolically (fake tensors) instead of asking a plan per T.
 * A bad desc is MOEJIT_ERROR_INVALID_ARGUMENT naming the field, as moejit_plan_create. */
MOEJIT_API moejit_status_t moejit_saved_size_terms(const moejit_plan_desc_t *desc,
                                                   int64_t *bytes_per_token,
                                                   int64_t *constant_bytes);
MOEJIT_API moejit_status_t moejit_plan_forward(moejit_plan_t plan,
                                               const moejit_forward_args_t *args);
MOEJIT_API moejit_status_t moejit_plan_backward(moejit_plan_t plan,
                                                const moejit_backward_args_t *args);

/* ---------------------------------------------------------------- the backward in two parts
 * Since 0.13, bf16 plans (an FP8 plan: MOEJIT_ERROR_UNSUPPORTED). moejit_plan_backward's work,
 * in two calls on the same args (consume_saved must be 1), so that a caller can allocate each
 * part's outputs and workspace just before it and free the workspace after it: the step's peak
 * then holds either d(a*w) [S,I] or fc1's weight gradients and dx, never both.
 *   DOWN: fc2's side. Reads dout, w_down, b_down, saved, and routing_weights when the plan's
 *         desc->routing_weights_in_backward is 1 (since 0.14); writes d_routing_weights,
 *         dw_down, db_down, and the SwiGLU gradient over the saved g and u. x, dx and fc1's
 *         weights and gradients are not read (may be NULL).
 *   UP:   fc1's side, after DOWN on the same saved (stream order): reads x, fc1's weights and
 *         the SwiGLU gradient in saved; writes dx, dw_gate/dw_up or dw_gate_up, db_gate_up.
 *         dout, routing_weights, w_down, b_down, d_routing_weights, dw_down and db_down are
 *         not read (may be NULL). Until its last kernel (the gather into dx) UP uses dx's T*H
 *         elements as scratch for its weight gradients' split reductions (an expert with very
 *         many rows reduced in segments; docs/DESIGN.md 3.3).
 * The results are moejit_plan_backward's (with consume_saved 1), bitwise except where UP's
 * scratch is too small for the split the whole backward takes: its reductions then use longer
 * segments, or none (the same fixed order; deterministic for a given T).
 * An UP call without its DOWN reads g and u as if they were their gradient: garbage, not an
 * error (the library cannot see that on the host). Each part's workspace:
 * moejit_plan_backward_part_workspace_size. */
typedef MOEJIT_ENUM(moejit_backward_part) {
    MOEJIT_BACKWARD_PART_DOWN = 1,
    MOEJIT_BACKWARD_PART_UP = 2
} moejit_backward_part_t;

MOEJIT_API moejit_status_t moejit_plan_backward_part_workspace_size(moejit_plan_t plan, int64_t num_tokens,
                                                                    moejit_backward_part_t part, size_t *bytes);
MOEJIT_API moejit_status_t moejit_plan_backward_part(moejit_plan_t plan, moejit_backward_part_t part,
                                                     const moejit_backward_args_t *args);

/* ---------------------------------------------------------------- pre-dispatched experts
 * Since 0.6. The plan's experts on rows already grouped by expert, for expert parallelism
 * (the rows a rank received from the others) and any caller that routes by itself: no routing
 * index, scatter or gather. The layer is this plus routing, scatter and gather.
 *
 * Rows: xs [R,H], the rows of local expert e being [expert_offsets[e], expert_offsets[e+1]),
 * expert_offsets an int32 [E+1] array on the device with expert_offsets[0] = 0, non-decreasing,
 * and expert_offsets[E] <= R (E = desc->num_experts); rows past expert_offsets[E] belong to no
 * expert: their ys (backward: dxs, d_row_weights) are written as zeros. The library reads the
 * offsets on the device only (no host synchronisation) and bounds them there before any other
 * kernel reads them (since 0.11; before, nonsense offsets faulted the CUDA context): they are
 * used as o'[0] = 0, o'[e] = clamp(expert_offsets[e], o'[e-1], R), a monotone sequence in
 * [0, R] equal to expert_offsets when those are well-formed; when any entry differs, the
 * results are those of o' (rows o' assigns nowhere are zero) and
 * MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS is set in the context's device error word
 * (moejit_context_device_errors). Forward and backward each bound (and report) on their own.
 * R is not bounded by anything but 2^31-1: every grid comes from R and the offsets.
 * ys[r] = w[r]·(h(xs[r]·W1[e]ᵀ + b1[e])·W2[e]ᵀ + b2[e]) with h the plan's activation, w the row
 * weights (fp32 [R]; NULL: 1) — the layer's math for one route per row. desc->top_k is not
 * used here except to scale desc->tokens_hint for tile choice (plans made for this entry: set
 * top_k 1 and tokens_hint to a typical R); index_dtype and routing_dtype are not used.
 * The backward gives dxs [R,H], d_row_weights (fp32 [R], only with row_weights) and the
 * experts' weight (and bias) gradients with the plan's weight_grad_dtype and accumulation.
 * Weights, biases and their gradients are as in moejit_forward_args_t/moejit_backward_args_t.
 * No host synchronisation; saved is written by the forward and read by the backward. */
typedef struct moejit_experts_forward_args {
    size_t struct_size;
    int64_t num_rows;               /* R >= 0 */
    const void *xs;                 /* [R,H] in dtype, grouped by expert */
    const int32_t *expert_offsets;  /* [E+1] on the device */
    const float *row_weights;       /* [R] fp32, or NULL (every weight 1) */
    const void *w_gate;             /* split */
    const void *w_up;               /* split */
    const void *w_gate_up;          /* merged / interleaved */
    const void *w_down;
    const void *b_gate_up;          /* has_bias */
    const void *b_down;             /* has_bias */
    void *ys;                       /* [R,H] in dtype */
    void *saved;                    /* moejit_plan_experts_saved_size bytes, kept for backward */
    size_t saved_size;
    void *workspace;                /* moejit_plan_experts_workspace_size bytes, scratch */
    size_t workspace_size;
    void *stream;
} moejit_experts_forward_args_t;

typedef struct moejit_experts_backward_args {
    size_t struct_size;
    int64_t num_rows;               /* R, as in forward */
    const void *xs;                 /* as in forward */
    const int32_t *expert_offsets;  /* as in forward */
    const float *row_weights;       /* as in forward */
    const void *dys;                /* [R,H]: the gradient of ys */
    const void *w_gate;
    const void *w_up;
    const void *w_gate_up;
    const void *w_down;
    const void *b_down;             /* has_bias (d_row_weights needs it) */
    const void *saved;              /* written by the forward call */
    size_t saved_size;
    void *dxs;                      /* [R,H] in dtype */
    float *d_row_weights;           /* [R] fp32: with row_weights (else NULL) */
    void *dw_gate;                  /* split, [E,I,H] in weight_grad_dtype */
    void *dw_up;
    void *dw_gate_up;               /* merged / interleaved */
    void *dw_down;
    void *db_gate_up;               /* has_bias */
    void *db_down;                  /* has_bias */
    void *workspace;
    size_t workspace_size;
    void *stream;
} moejit_experts_backward_args_t;

MOEJIT_API moejit_status_t moejit_experts_forward_args_init_sized(moejit_experts_forward_args_t *args,
                                                                   size_t struct_size);
#define moejit_experts_forward_args_init(args) \
    moejit_experts_forward_args_init_sized((args), sizeof(moejit_experts_forward_args_t))
MOEJIT_API moejit_status_t moejit_experts_backward_args_init_sized(moejit_experts_backward_args_t *args,
                                                                    size_t struct_size);
#define moejit_experts_backward_args_init(args) \
    moejit_experts_backward_args_init_sized((args), sizeof(moejit_experts_backward_args_t))

/* Sizes for R = num_rows (0 <= R <= 2^31-1, else MOEJIT_ERROR_INVALID_ARGUMENT naming
 * num_rows). */
MOEJIT_API moejit_status_t moejit_plan_experts_saved_size(moejit_plan_t plan, int64_t num_rows,
                                                          size_t *bytes);
/* moejit_saved_size_terms for the experts entry: saved_size(R) <= *bytes_per_row * R +
 * *constant_bytes for every plan of *desc and every valid R (since 0.11). */
MOEJIT_API moejit_status_t moejit_experts_saved_size_terms(const moejit_plan_desc_t *desc,
                                                           int64_t *bytes_per_row,
                                                           int64_t *constant_bytes);
MOEJIT_API moejit_status_t moejit_plan_experts_workspace_size(moejit_plan_t plan, int64_t num_rows,
                                                              size_t *bytes);
MOEJIT_API moejit_status_t moejit_plan_experts_forward(moejit_plan_t plan,
                                                       const moejit_experts_forward_args_t *args);
MOEJIT_API moejit_status_t moejit_plan_experts_backward(moejit_plan_t plan,
                                                        const moejit_experts_backward_args_t *args);

#ifdef __cplusplus
}
#endif

#endif /* MOEJIT_H */
