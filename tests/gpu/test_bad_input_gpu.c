/* Bad input that needs a device (issue 16 item 7), from C: out-of-range expert ids on the GPU
 * (dropped routes, never memory errors: run it under compute-sanitizer, dev/gpu/sanitize.sh),
 * a real plan's size queries and forward / backward with negative and overflowing T, buffers one
 * byte short, NULL and misaligned device pointers and struct_size rules. Each failure's status and
 * that its message names the argument. Exits 77 (skipped) without a usable GPU.
 * On 0.3.0 the size-query overflow cases failed (T·k unchecked: UB, a wrapped size, SUCCESS).
 */
#include "moejit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/c_check.h"
#include "../abi/c_cuda.h"
#include "../support/c_gpu_context.h"
#include "layer_args.h"

#define INV MOEJIT_ERROR_INVALID_ARGUMENT
#define OK MOEJIT_SUCCESS

enum { T = 64, K = 4, E = 8, H = 64, I = 64 };

static float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Ids: token 0 has every route out of range; others mix valid ids with -1, E, INT32_MAX, INT32_MIN. */
static int32_t id_of(int t, int j) {
    static const int32_t bad[] = {-1, E, INT32_MAX, INT32_MIN};
    if (t == 0) return bad[j % 4];
    if ((t + j) % 5 == 0) return bad[(t + j) % 4];
    return (t * 3 + j) % E;
}

static void test_routing_out_of_range(moejit_context_t c) {
    int32_t ids32[T * K], counts[E], offsets[E + 1], scatter[T * K];
    int64_t ids64[T * K];
    size_t ws = 0;
    int valid = 0, t, j, e, pass;
    void *d_ids = c_cuda_alloc(sizeof ids64), *d_counts = c_cuda_alloc(sizeof counts);
    void *d_offsets = c_cuda_alloc(sizeof offsets), *d_scatter = c_cuda_alloc(sizeof scatter), *d_ws;
    for (t = 0; t < T; ++t)
        for (j = 0; j < K; ++j) {
            ids32[t * K + j] = id_of(t, j);
            ids64[t * K + j] = id_of(t, j);
            if (t % 7 == 3 && ids64[t * K + j] < 0) ids64[t * K + j] = (int64_t)1 << 40; /* int64-only */
            if (t % 7 == 3 && ids64[t * K + j] == (int64_t)1 << 40) ids64[t * K + j] = -((int64_t)1 << 40);
            valid += ids32[t * K + j] >= 0 && ids32[t * K + j] < E;
        }
    CHECK_STATUS(moejit_routing_index_workspace_size(T, K, E, &ws), OK, NULL);
    d_ws = c_cuda_alloc(ws);
    for (pass = 0; pass < 2; ++pass) {
        const moejit_dtype_t dt = pass ? MOEJIT_DTYPE_INT64 : MOEJIT_DTYPE_INT32;
        int seen[T * K];
        int sum = 0;
        memset(seen, 0, sizeof seen);
        if (pass)
            c_cuda_put(d_ids, ids64, sizeof ids64);
        else
            c_cuda_put(d_ids, ids32, sizeof ids32);
        CHECK_STATUS(moejit_routing_index(c, dt, d_ids, T, K, E, (int32_t *)d_counts, (int32_t *)d_offsets,
                                          (int32_t *)d_scatter, d_ws, ws, NULL),
                     OK, NULL);
        c_cuda_get(counts, d_counts, sizeof counts);
        c_cuda_get(offsets, d_offsets, sizeof offsets);
        c_cuda_get(scatter, d_scatter, sizeof scatter);
        for (e = 0; e < E; ++e) sum += counts[e];
        CHECK(sum == valid);
        CHECK(offsets[E] == valid);
        for (t = 0; t < T * K; ++t) {
            const int ok = ids32[t] >= 0 && ids32[t] < E;
            if (!ok) {
                CHECK(scatter[t] == -1);
            } else {
                CHECK(scatter[t] >= 0 && scatter[t] < valid);
                if (scatter[t] >= 0 && scatter[t] < valid) CHECK(seen[scatter[t]]++ == 0);
            }
        }
        /* Misaligned device pointers, one byte short workspace. */
        CHECK_STATUS(moejit_routing_index(c, dt, (char *)d_ids + 2, T, K, E, (int32_t *)d_counts,
                                          (int32_t *)d_offsets, (int32_t *)d_scatter, d_ws, ws, NULL),
                     INV, "selected_experts");
        CHECK_STATUS(moejit_routing_index(c, dt, d_ids, T, K, E, (int32_t *)d_counts, (int32_t *)d_offsets,
                                          (int32_t *)d_scatter, d_ws, ws - 1, NULL),
                     INV, "workspace_size");
    }
    c_cuda_free(d_ids);
    c_cuda_free(d_counts);
    c_cuda_free(d_offsets);
    c_cuda_free(d_scatter);
    c_cuda_free(d_ws);
}

static void test_plan(moejit_context_t c) {
    moejit_plan_desc_t desc;
    moejit_plan_t plan = NULL;
    moejit_forward_args_t f;
    moejit_backward_args_t b;
    size_t saved = 0, work = 0, consuming = 0, bytes = 0;
    const size_t xb = (size_t)T * H * 2, wb = (size_t)E * I * H * 2, rb = (size_t)T * K * 4;
    void *x, *ids, *rw, *wg, *wu, *wd, *out, *dsaved, *dwork, *dout, *dx, *drw, *dwg, *dwu, *dwd;
    uint16_t hx[T * H], hw[E * I * H];
    int32_t hid[T * K];
    float hrw[T * K];
    int t, j, i, finite = 1;

    layer_desc_init(&desc, H, I, E, K);
    desc.index_dtype = MOEJIT_DTYPE_INT32;
    desc.routing_dtype = MOEJIT_DTYPE_FP32;
    desc.weight_grad_dtype = MOEJIT_DTYPE_FP32;
    CHECK_STATUS(moejit_plan_create(c, &desc, &plan), OK, NULL);
    if (!plan) return;

    /* Size queries: validated like the calls. */
    CHECK_STATUS(moejit_plan_saved_size(plan, T, NULL), INV, "bytes");
    CHECK_STATUS(moejit_plan_workspace_size(plan, T, NULL), INV, "bytes");
    CHECK_STATUS(moejit_plan_saved_size(plan, -1, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_workspace_size(plan, INT64_MIN, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_saved_size(plan, INT64_MAX, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_workspace_size(plan, INT64_MAX / 2, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_saved_size(plan, (int64_t)1 << 30, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_workspace_size(plan, ((int64_t)1 << 31) / K, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_saved_size(plan, T, &saved), OK, NULL);
    CHECK_STATUS(moejit_plan_workspace_size(plan, T, &work), OK, NULL);
    CHECK_STATUS(moejit_plan_consuming_workspace_size(plan, T, NULL), INV, "bytes");
    CHECK_STATUS(moejit_plan_consuming_workspace_size(plan, -1, &bytes), INV, "num_tokens");
    CHECK_STATUS(moejit_plan_consuming_workspace_size(plan, T, &consuming), OK, NULL);
    CHECK(consuming > 0 && consuming <= work);

    for (i = 0; i < T * H; ++i) hx[i] = 0x3F00; /* 0.5 */
    for (i = 0; i < E * I * H; ++i) hw[i] = (uint16_t)(0x3C00 + (i % 7)); /* ~0.008 */
    for (t = 0; t < T; ++t)
        for (j = 0; j < K; ++j) {
            hid[t * K + j] = id_of(t, j);
            hrw[t * K + j] = 0.25f;
        }
    /* By size: [T,H] bf16, [T,k] int32/fp32, [E,I,H] bf16 weights and their fp32 gradients. */
    x = c_cuda_alloc(xb), out = c_cuda_alloc(xb), dout = c_cuda_alloc(xb), dx = c_cuda_alloc(xb);
    ids = c_cuda_alloc(rb), rw = c_cuda_alloc(rb), drw = c_cuda_alloc(rb);
    wg = c_cuda_alloc(wb), wu = c_cuda_alloc(wb), wd = c_cuda_alloc(wb);
    dwg = c_cuda_alloc(wb * 2), dwu = c_cuda_alloc(wb * 2), dwd = c_cuda_alloc(wb * 2);
    dsaved = c_cuda_alloc(saved);
    dwork = c_cuda_alloc(work);
    c_cuda_put(x, hx, xb);
    c_cuda_put(dout, hx, xb);
    c_cuda_put(ids, hid, rb);
    c_cuda_put(rw, hrw, rb);
    c_cuda_put(wg, hw, wb);
    c_cuda_put(wu, hw, wb);
    c_cuda_put(wd, hw, wb);

    moejit_forward_args_init(&f);
    f.num_tokens = T;
    f.x = x;
    f.selected_experts = ids;
    f.routing_weights = rw;
    f.w_gate = wg, f.w_up = wu, f.w_down = wd;
    f.out = out;
    f.saved = dsaved, f.saved_size = saved;
    f.workspace = dwork, f.workspace_size = work;
#define FWD_CASE(field, bad, needle) CHECK_FIELD(f, field, bad, moejit_plan_forward(plan, &f), INV, needle)
    FWD_CASE(num_tokens, -1, "args->num_tokens");
    FWD_CASE(num_tokens, INT64_MAX, "args->num_tokens");
    FWD_CASE(num_tokens, (int64_t)1 << 30, "args->num_tokens");
    FWD_CASE(x, NULL, "args->x");
    FWD_CASE(x, (char *)x + 2, "args->x");
    FWD_CASE(selected_experts, NULL, "args->selected_experts");
    FWD_CASE(routing_weights, NULL, "args->routing_weights");
    FWD_CASE(w_gate, (char *)wg + 8, "args->w_gate");
    FWD_CASE(w_down, NULL, "args->w_down");
    FWD_CASE(out, (char *)out + 4, "args->out");
    FWD_CASE(saved, NULL, "args->saved");
    FWD_CASE(saved_size, saved - 1, "args->saved_size");
    /* Since 0.12 a forward needs only the consuming size (its regions are the same). */
    FWD_CASE(workspace_size, consuming - 1, "moejit_plan_consuming_workspace_size");
    FWD_CASE(workspace, (char *)dwork + 1, "args->workspace");
    FWD_CASE(struct_size, 0, "args->struct_size");
    FWD_CASE(struct_size, 24, "args->struct_size");
    /* Out-of-range ids: dropped routes. Token 0 has no valid route: its output row is 0. */
    CHECK_STATUS(moejit_plan_forward(plan, &f), OK, NULL);
    c_cuda_get(hx, out, xb);
    for (i = 0; i < H; ++i) CHECK(hx[i] == 0 || hx[i] == 0x8000);
    for (i = 0; i < T * H; ++i) finite &= isfinite(bf16_to_float(hx[i])) != 0;
    CHECK(finite);

    layer_backward_args(&f, &b); /* the forward's x, routing weights, weights, saved, workspace */
    b.dout = dout;
    b.dx = dx;
    b.d_routing_weights = drw;
    b.dw_gate = dwg, b.dw_up = dwu, b.dw_down = dwd;
#define BWD_CASE(field, bad, needle) CHECK_FIELD(b, field, bad, moejit_plan_backward(plan, &b), INV, needle)
    BWD_CASE(num_tokens, -3, "args->num_tokens");
    BWD_CASE(num_tokens, INT64_MAX, "args->num_tokens");
    BWD_CASE(dout, NULL, "args->dout");
    BWD_CASE(x, NULL, "args->x");
    BWD_CASE(x, (char *)x + 2, "args->x");
    BWD_CASE(dx, NULL, "args->dx");
    BWD_CASE(d_routing_weights, NULL, "args->d_routing_weights");
    BWD_CASE(dw_gate, (char *)dwg + 4, "args->dw_gate");
    BWD_CASE(dw_down, NULL, "args->dw_down");
    BWD_CASE(saved_size, saved - 1, "args->saved_size");
    BWD_CASE(workspace_size, work - 1, "args->workspace_size");
    BWD_CASE(consume_saved, 2, "args->consume_saved");
    BWD_CASE(consume_saved, -1, "args->consume_saved");
    {
        /* A consuming call needs only the consuming size, and names that query when short. */
        moejit_backward_args_t keep = b;
        b.consume_saved = 1;
        b.workspace_size = consuming - 1;
        CHECK_STATUS(moejit_plan_backward(plan, &b), INV, "moejit_plan_consuming_workspace_size");
        b = keep;
    }
    BWD_CASE(struct_size, 0, "args->struct_size");
    BWD_CASE(struct_size, offsetof(moejit_backward_args_t, x) + 4, "args->struct_size");
    /* 0.1's struct (no x) with T > 0: named as args->x; with T = 0: accepted and run. */
    BWD_CASE(struct_size, offsetof(moejit_backward_args_t, x), "args->x");
    {
        moejit_backward_args_t keep = b;
        b.struct_size = offsetof(moejit_backward_args_t, x);
        b.num_tokens = 0;
        b.x = (void *)(uintptr_t)0xdead; /* past struct_size: must be ignored */
        CHECK_STATUS(moejit_plan_backward(plan, &b), OK, NULL);
        b = keep;
    }
    CHECK_STATUS(moejit_plan_backward(plan, &b), OK, NULL);
    c_cuda_get(hx, dx, xb);
    for (i = 0; i < H; ++i) CHECK(hx[i] == 0 || hx[i] == 0x8000); /* token 0: no route, no gradient */
    finite = 1;
    for (i = 0; i < T * H; ++i) finite &= isfinite(bf16_to_float(hx[i])) != 0;
    CHECK(finite);
    c_cuda_get(hrw, drw, rb);
    for (t = 0; t < T * K; ++t)
        if (hid[t] < 0 || hid[t] >= E) CHECK(hrw[t] == 0.0f);

    moejit_plan_destroy(plan);
    {
        void *all[] = {x, ids, rw, wg, wu, wd, out, dsaved, dwork, dout, dx, drw, dwg, dwu, dwd};
        for (i = 0; i < (int)(sizeof all / sizeof all[0]); ++i) c_cuda_free(all[i]);
    }
}

int main(void) {
    moejit_context_t c = gpu_context_or_skip();
    if (!c) return 77;
    test_routing_out_of_range(c);
    test_plan(c);
    moejit_context_destroy(c);
    return c_check_result("bad_input_gpu");
}
