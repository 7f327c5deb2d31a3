/*
 * One MoE layer, forward and backward, through moejit.h only.
 *
 * Device memory comes from the CUDA driver, loaded with dlopen like moejit itself does
 * (cuda_driver.h, next to this file), so the example builds without the CUDA toolkit and runs
 * (printing the status) without a GPU.
 * Shapes: T tokens, H hidden, I intermediate, E experts, top-k K; bf16 activations and
 * weights, int32 expert ids, fp32 routing weights.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "layer_args.h"
#include "moejit.h"

enum { T = 64, H = 512, I = 256, E = 8, K = 2 };

/* ---- the driver entry points (cuda_driver.h: dlopened, shared with moejit-bench) */
typedef cuda_devptr_t devptr_t;
static struct cuda_driver cu;

#define CU(call)                                                                  \
    do {                                                                          \
        int cu_status_ = (call);                                                  \
        if (cu_status_ != 0) {                                                    \
            fprintf(stderr, "%s failed: CUDA error %d\n", #call, cu_status_);     \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

#define MJ(call)                                                                  \
    do {                                                                          \
        moejit_status_t mj_status_ = (call);                                      \
        if (mj_status_ != MOEJIT_SUCCESS) {                                       \
            fprintf(stderr, "%s failed: %s: %s\n", #call,                         \
                    moejit_status_string(mj_status_), moejit_last_error());       \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

/* ---- host data helpers */
static uint16_t to_bf16(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float uniform(unsigned *state) { /* in [-1, 1) */
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 23) - 1.0f;
}

/* A device buffer of n bf16 values uniform in [-scale, scale). */
static devptr_t random_bf16(size_t n, float scale, unsigned *state) {
    uint16_t *host = malloc(n * sizeof *host);
    devptr_t dev = 0;
    size_t i;
    if (!host) exit(1);
    for (i = 0; i < n; ++i) host[i] = to_bf16(scale * uniform(state));
    CU(cu.mem_alloc(&dev, n * sizeof *host));
    CU(cu.memcpy_htod(dev, host, n * sizeof *host));
    free(host);
    return dev;
}

static devptr_t device_copy(const void *host, size_t bytes) {
    devptr_t dev = 0;
    CU(cu.mem_alloc(&dev, bytes));
    CU(cu.memcpy_htod(dev, host, bytes));
    return dev;
}

static devptr_t device_alloc(size_t bytes) {
    devptr_t dev = 0;
    if (bytes) CU(cu.mem_alloc(&dev, bytes));
    return dev;
}

/* Sum of |v| over a bf16 device buffer; -1 if any value is not finite. */
static double abs_sum_bf16(devptr_t dev, size_t n) {
    uint16_t *host = malloc(n * sizeof *host);
    double sum = 0;
    size_t i;
    if (!host) exit(1);
    CU(cu.memcpy_dtoh(host, dev, n * sizeof *host));
    for (i = 0; i < n && sum >= 0; ++i) {
        float v = from_bf16(host[i]);
        sum = isfinite(v) ? sum + fabs(v) : -1;
    }
    free(host);
    return sum;
}

#define PTR(d) ((void *)(uintptr_t)(d))

int main(void) {
    moejit_context_t ctx = NULL;
    moejit_plan_t plan = NULL;
    moejit_plan_desc_t desc;
    moejit_forward_args_t fwd;
    moejit_backward_args_t bwd;
    void *cu_ctx = NULL;
    int device = 0, t, j;
    unsigned seed = 1234;
    size_t saved_size = 0, ws_size = 0;
    int32_t selected[T * K];
    float routing[T * K];
    devptr_t x, w_gate, w_up, w_down, d_selected, d_routing, out, saved, workspace;
    devptr_t dout, dx, d_routing_grad, dw_gate, dw_up, dw_down;

    printf("moejit %s\n", moejit_version());
    /* Without a driver or a device this is a status, not a crash. */
    moejit_status_t status = moejit_context_create(NULL, &ctx);
    if (status == MOEJIT_ERROR_NO_DRIVER || status == MOEJIT_ERROR_NO_DEVICE) {
        printf("no GPU here: %s (%s)\n", moejit_status_string(status), moejit_last_error());
        return 0;
    }
    MJ(status);
    {
        char err[256];
        if (!cuda_driver_load(&cu, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    /* moejit uses the device's primary context; allocate in the same one. */
    CU(cu.init(0));
    CU(cu.device_get(&device, 0));
    CU(cu.primary_ctx_retain(&cu_ctx, device));
    CU(cu.ctx_set_current(cu_ctx));

    MJ(layer_desc_init(&desc, H, I, E, K));
    desc.dtype = MOEJIT_DTYPE_BF16;
    desc.fc1_layout = MOEJIT_FC1_SPLIT;
    desc.activation = MOEJIT_ACTIVATION_SWIGLU;
    desc.swiglu_limit = 0.0f; /* none */
    desc.weight_grad_dtype = MOEJIT_DTYPE_BF16;
    desc.index_dtype = MOEJIT_DTYPE_INT32;
    desc.routing_dtype = MOEJIT_DTYPE_FP32;
    MJ(moejit_plan_create(ctx, &desc, &plan)); /* JIT-compiles or loads every kernel */
    MJ(moejit_plan_saved_size(plan, T, &saved_size));
    MJ(moejit_plan_workspace_size(plan, T, &ws_size)); /* serves forward and backward */

    /* Two distinct experts per token; weights 0.75 / 0.25. */
    for (t = 0; t < T; ++t)
        for (j = 0; j < K; ++j) {
            selected[t * K + j] = (t + 3 * j) % E;
            routing[t * K + j] = j == 0 ? 0.75f : 0.25f;
        }
    x = random_bf16((size_t)T * H, 1.0f, &seed);
    w_gate = random_bf16((size_t)E * I * H, 1.0f / sqrtf((float)H), &seed);
    w_up = random_bf16((size_t)E * I * H, 1.0f / sqrtf((float)H), &seed);
    w_down = random_bf16((size_t)E * H * I, 1.0f / sqrtf((float)I), &seed);
    d_selected = device_copy(selected, sizeof selected);
    d_routing = device_copy(routing, sizeof routing);
    out = device_alloc((size_t)T * H * 2);
    saved = device_alloc(saved_size);
    workspace = device_alloc(ws_size);

    MJ(moejit_forward_args_init(&fwd));
    fwd.num_tokens = T;
    fwd.x = PTR(x);
    fwd.selected_experts = PTR(d_selected);
    fwd.routing_weights = PTR(d_routing);
    fwd.w_gate = PTR(w_gate), fwd.w_up = PTR(w_up), fwd.w_down = PTR(w_down);
    fwd.out = PTR(out);
    fwd.saved = PTR(saved), fwd.saved_size = saved_size;
    fwd.workspace = PTR(workspace), fwd.workspace_size = ws_size;
    fwd.stream = NULL; /* the legacy default stream */
    MJ(moejit_plan_forward(plan, &fwd));

    dout = random_bf16((size_t)T * H, 1.0f, &seed);
    dx = device_alloc((size_t)T * H * 2);
    d_routing_grad = device_alloc(sizeof routing);
    dw_gate = device_alloc((size_t)E * I * H * 2);
    dw_up = device_alloc((size_t)E * I * H * 2);
    dw_down = device_alloc((size_t)E * H * I * 2);

    /* The forward's x, routing weights, weights, saved, workspace and stream (backward re-reads
       x's rows), then the backward's own buffers: layer_args.h. */
    MJ(layer_backward_args(&fwd, &bwd));
    bwd.dout = PTR(dout);
    bwd.dx = PTR(dx);
    bwd.d_routing_weights = PTR(d_routing_grad);
    bwd.dw_gate = PTR(dw_gate), bwd.dw_up = PTR(dw_up), bwd.dw_down = PTR(dw_down);
    MJ(moejit_plan_backward(plan, &bwd));
    CU(cu.ctx_synchronize());

    {
        double s_out = abs_sum_bf16(out, (size_t)T * H);
        double s_dx = abs_sum_bf16(dx, (size_t)T * H);
        double s_dw = abs_sum_bf16(dw_down, (size_t)E * H * I);
        printf("T=%d H=%d I=%d E=%d k=%d: sum|out| = %.3f, sum|dx| = %.3f, sum|dW_down| = %.3f\n",
               T, H, I, E, K, s_out, s_dx, s_dw);
        if (s_out <= 0 || s_dx <= 0 || s_dw <= 0) {
            fprintf(stderr, "non-finite or all-zero results\n");
            return 1;
        }
    }

    {
        /* saved and workspace may be 0 (nothing allocated for a size of 0) */
        const devptr_t all[] = {x, w_gate, w_up, w_down, d_selected, d_routing, out, saved, workspace,
                                dout, dx, d_routing_grad, dw_gate, dw_up, dw_down};
        size_t i;
        for (i = 0; i < sizeof all / sizeof all[0]; ++i)
            if (all[i]) CU(cu.mem_free(all[i]));
    }
    moejit_plan_destroy(plan);
    moejit_context_destroy(ctx);
    CU(cu.primary_ctx_release(device));
    return 0;
}
