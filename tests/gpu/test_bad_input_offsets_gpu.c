/* Nonsense expert offsets on the device (issue 29 item 2), from C: the pre-dispatched experts
 * entry with int32 extremes, decreasing and past-R offsets must not fault. The library bounds
 * them on the device (o'[0] = 0, o'[e] = clamp(offsets[e], o'[e-1], R)), computes the rows as o'
 * assigns them, writes zeros for rows o' assigns nowhere, and sets
 * MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS (moejit_context_device_errors). Checked per case: no CUDA
 * error, the flag exactly when the offsets were not well-formed, every output written (NaN
 * first) and finite, the rows against a float64 reference of o' (forward ys; backward dxs and
 * d_row_weights), zeros past o'[E], and at the end a well-formed call that still matches its
 * reference on the same context. Exits 77 (skipped) without a usable GPU.
 * On 0.10.0 the first case faulted the CUDA context (CUDA_ERROR_ILLEGAL_ADDRESS on the next call,
 * every call after it failing) and moejit_context_device_errors did not exist.
 */
#include "moejit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../abi/c_check.h"
#include "../abi/c_cuda.h"
#include "../support/c_gpu_context.h"

#define OK MOEJIT_SUCCESS

enum { R = 100, E = 8, H = 64, I = 64 };

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (finite inputs only) */
    return (uint16_t)(u >> 16);
}
static double from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static double uniform(void) { return (double)rand() / RAND_MAX * 2.0 - 1.0; }
static void fill_bf16(uint16_t *p, size_t n, double scale) {
    size_t i;
    for (i = 0; i < n; ++i) p[i] = to_bf16((float)(uniform() * scale));
}
static void fill_nan_bf16(void *device, size_t n) {
    uint16_t *h = malloc(n * 2);
    size_t i;
    for (i = 0; i < n; ++i) h[i] = 0x7fc0;
    c_cuda_put(device, h, n * 2);
    free(h);
}
static void fill_nan_f32(void *device, size_t n) {
    float *h = malloc(n * 4);
    size_t i;
    for (i = 0; i < n; ++i) h[i] = NAN;
    c_cuda_put(device, h, n * 4);
    free(h);
}

/* What the library documents it uses in place of `x`: a monotone sequence in [0, rows]. */
static void bound_offsets(const int32_t *x, int32_t rows, int32_t *o) {
    int e;
    o[0] = 0;
    for (e = 1; e <= E; ++e) {
        int32_t v = x[e] < o[e - 1] ? o[e - 1] : x[e];
        o[e] = v > rows ? rows : v;
    }
}
static int well_formed(const int32_t *x, int32_t rows) {
    int32_t o[E + 1];
    bound_offsets(x, rows, o);
    return memcmp(o, x, sizeof o) == 0;
}
static int expert_of(const int32_t *o, int r) {
    int e;
    for (e = 0; e < E; ++e)
        if (r >= o[e] && r < o[e + 1]) return e;
    return -1;
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

/* Host copies of the inputs, and the device buffers. */
struct layer {
    uint16_t xs[R * H], wg[E * I * H], wu[E * I * H], wd[E * H * I], dys[R * H];
    float w[R];
    void *d_xs, *d_wg, *d_wu, *d_wd, *d_dys, *d_w, *d_offsets, *d_ys, *d_dxs, *d_dw, *d_dwg, *d_dwu, *d_dwd;
    void *d_saved, *d_work;
    size_t saved, work;
};

/* Float64 reference for row r of expert e: ys (forward), dxs and d_row_weights (backward). */
static void reference_row(const struct layer *L, int r, int e, double *ys, double *dxs, double *dw) {
    double g[I], u[I], a[I], daw[I], dg[I], du[I];
    int i, h;
    *dw = 0;
    for (i = 0; i < I; ++i) {
        g[i] = u[i] = 0;
        for (h = 0; h < H; ++h) {
            g[i] += from_bf16(L->xs[r * H + h]) * from_bf16(L->wg[(e * I + i) * H + h]);
            u[i] += from_bf16(L->xs[r * H + h]) * from_bf16(L->wu[(e * I + i) * H + h]);
        }
        a[i] = silu(g[i]) * u[i];
        daw[i] = 0;
        for (h = 0; h < H; ++h) daw[i] += from_bf16(L->dys[r * H + h]) * from_bf16(L->wd[(e * H + h) * I + i]);
        *dw += a[i] * daw[i];
        {
            const double s = 1.0 / (1.0 + exp(-g[i])), dh = L->w[r] * daw[i];
            dg[i] = dh * u[i] * s * (1.0 + g[i] * (1.0 - s));
            du[i] = dh * silu(g[i]);
        }
    }
    for (h = 0; h < H; ++h) {
        ys[h] = 0;
        dxs[h] = 0;
        for (i = 0; i < I; ++i) {
            ys[h] += L->w[r] * a[i] * from_bf16(L->wd[(e * H + h) * I + i]);
            dxs[h] += dg[i] * from_bf16(L->wg[(e * I + i) * H + h]) + du[i] * from_bf16(L->wu[(e * I + i) * H + h]);
        }
    }
}

static double rel(double err2, double ref2) { return sqrt(err2) / (sqrt(ref2) + 1e-30); }

/* One forward and backward with `offsets` on R rows; checks everything the header promises. */
static void run_case(moejit_context_t c, moejit_plan_t plan, struct layer *L, const int32_t *offsets,
                     const char *name) {
    moejit_experts_forward_args_t f;
    moejit_experts_backward_args_t b;
    uint16_t ys[R * H], dxs[R * H];
    float dw[R];
    int32_t o[E + 1];
    uint32_t errors = 0xdead;
    const int expect_flag = !well_formed(offsets, R);
    double ys_err = 0, ys_ref = 0, dx_err = 0, dx_ref = 0, dw_err = 0, dw_ref = 0;
    int r, h, finite = 1, tail_zero = 1;

    printf("case %s: offsets", name);
    for (r = 0; r <= E; ++r) printf(" %d", (int)offsets[r]);
    bound_offsets(offsets, R, o);
    printf(" -> bounded");
    for (r = 0; r <= E; ++r) printf(" %d", (int)o[r]);
    printf(" (flag expected: %d)\n", expect_flag);

    c_cuda_put(L->d_offsets, offsets, sizeof(int32_t) * (E + 1));
    fill_nan_bf16(L->d_ys, R * H);
    fill_nan_bf16(L->d_dxs, R * H);
    fill_nan_f32(L->d_dw, R);
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL); /* start clean */

    moejit_experts_forward_args_init(&f);
    f.num_rows = R;
    f.xs = L->d_xs;
    f.expert_offsets = L->d_offsets;
    f.row_weights = L->d_w;
    f.w_gate = L->d_wg, f.w_up = L->d_wu, f.w_down = L->d_wd;
    f.ys = L->d_ys;
    f.saved = L->d_saved, f.saved_size = L->saved;
    f.workspace = L->d_work, f.workspace_size = L->work;
    CHECK_STATUS(moejit_plan_experts_forward(plan, &f), OK, NULL);
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL);
    CHECK(errors == (expect_flag ? (uint32_t)MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS : 0u));

    moejit_experts_backward_args_init(&b);
    b.num_rows = R;
    b.xs = L->d_xs;
    b.expert_offsets = L->d_offsets;
    b.row_weights = L->d_w;
    b.dys = L->d_dys;
    b.w_gate = L->d_wg, b.w_up = L->d_wu, b.w_down = L->d_wd;
    b.saved = L->d_saved, b.saved_size = L->saved;
    b.dxs = L->d_dxs;
    b.d_row_weights = L->d_dw;
    b.dw_gate = L->d_dwg, b.dw_up = L->d_dwu, b.dw_down = L->d_dwd;
    b.workspace = L->d_work, b.workspace_size = L->work;
    CHECK_STATUS(moejit_plan_experts_backward(plan, &b), OK, NULL);
    CHECK_STATUS(moejit_context_device_errors(c, 0, &errors), OK, NULL);
    CHECK(errors == (expect_flag ? (uint32_t)MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS : 0u));
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL); /* not cleared by a read */
    CHECK(errors == (expect_flag ? (uint32_t)MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS : 0u));

    c_cuda_get(ys, L->d_ys, sizeof ys);
    c_cuda_get(dxs, L->d_dxs, sizeof dxs);
    c_cuda_get(dw, L->d_dw, sizeof dw);
    for (r = 0; r < R; ++r) {
        const int e = expert_of(o, r);
        double ry[H], rdx[H], rdw;
        if (e < 0) { /* assigned nowhere: zeros */
            for (h = 0; h < H; ++h) tail_zero &= ys[r * H + h] == 0 && dxs[r * H + h] == 0;
            tail_zero &= dw[r] == 0.0f;
            continue;
        }
        reference_row(L, r, e, ry, rdx, &rdw);
        for (h = 0; h < H; ++h) {
            const double y = from_bf16(ys[r * H + h]), dx = from_bf16(dxs[r * H + h]);
            finite &= isfinite(y) && isfinite(dx);
            ys_err += (y - ry[h]) * (y - ry[h]);
            ys_ref += ry[h] * ry[h];
            dx_err += (dx - rdx[h]) * (dx - rdx[h]);
            dx_ref += rdx[h] * rdx[h];
        }
        finite &= isfinite(dw[r]);
        dw_err += (dw[r] - rdw) * (dw[r] - rdw);
        dw_ref += rdw * rdw;
    }
    CHECK(finite);
    CHECK(tail_zero);
    printf("  ys %.2e  dxs %.2e  d_row_weights %.2e (relative to float64)\n", rel(ys_err, ys_ref),
           rel(dx_err, dx_ref), rel(dw_err, dw_ref));
    if (o[E] > 0) {
        CHECK(rel(ys_err, ys_ref) < 2e-2);
        CHECK(rel(dx_err, dx_ref) < 3e-2);
        CHECK(rel(dw_err, dw_ref) < 3e-2);
    }
    /* The weight gradients: written, finite. */
    {
        size_t n = (size_t)E * I * H, i;
        uint16_t *g = malloc(n * 2);
        void *grads[3];
        int k, ok = 1;
        grads[0] = L->d_dwg, grads[1] = L->d_dwu, grads[2] = L->d_dwd;
        for (k = 0; k < 3; ++k) {
            c_cuda_get(g, grads[k], n * 2);
            for (i = 0; i < n; ++i) ok &= isfinite(from_bf16(g[i]));
        }
        CHECK(ok);
        free(g);
    }
}

/* R = 0 with nonsense offsets: the backward's weight-gradient GEMMs still run over every expert;
 * bounded, every expert is empty and its gradient exactly zero. */
static void run_zero_rows(moejit_context_t c, moejit_plan_t plan, struct layer *L) {
    static const int32_t bad[E + 1] = {7, -3, INT32_MAX, 5, INT32_MIN, 9, 1, 2, 100};
    moejit_experts_backward_args_t b;
    size_t saved = 0, work = 0, n = (size_t)E * I * H, i;
    uint16_t *g = malloc(n * 2);
    uint32_t errors = 0;
    int ok = 1;
    CHECK_STATUS(moejit_plan_experts_saved_size(plan, 0, &saved), OK, NULL);
    CHECK_STATUS(moejit_plan_experts_workspace_size(plan, 0, &work), OK, NULL);
    c_cuda_put(L->d_offsets, bad, sizeof bad);
    fill_nan_bf16(L->d_dwd, n);
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL);
    moejit_experts_backward_args_init(&b);
    b.num_rows = 0;
    b.expert_offsets = L->d_offsets;
    b.w_gate = L->d_wg, b.w_up = L->d_wu, b.w_down = L->d_wd;
    b.saved = L->d_saved, b.saved_size = saved;
    b.dw_gate = L->d_dwg, b.dw_up = L->d_dwu, b.dw_down = L->d_dwd;
    b.workspace = L->d_work, b.workspace_size = work;
    CHECK_STATUS(moejit_plan_experts_backward(plan, &b), OK, NULL);
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL);
    CHECK(errors == (uint32_t)MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS);
    c_cuda_get(g, L->d_dwd, n * 2);
    for (i = 0; i < n; ++i) ok &= g[i] == 0;
    CHECK(ok);
    free(g);
}

int main(void) {
    moejit_context_t c = gpu_context_or_skip();
    moejit_plan_desc_t d;
    moejit_plan_t plan = NULL;
    struct layer *L;
    /* The issue's case, E = 8, R = 100. */
    static const int32_t issue_case[E + 1] = {INT32_MIN, INT32_MAX, 0, INT32_MAX, INT32_MIN, 50, 100, INT32_MAX, 100};
    static const int32_t valid[E + 1] = {0, 10, 10, 30, 31, 60, 99, 99, 100};
    static const int32_t valid_short[E + 1] = {0, 5, 20, 20, 40, 41, 60, 70, 83}; /* rows 83.. no expert's */
    const unsigned seed = (unsigned)time(NULL);
    int k, e;
    uint32_t errors = 0;
    if (!c) return 77;
    printf("seed %u\n", seed);
    srand(seed);
    moejit_plan_desc_init(&d);
    d.hidden_size = H, d.intermediate_size = I, d.num_experts = E, d.top_k = 1, d.tokens_hint = R;
    CHECK_STATUS(moejit_plan_create(c, &d, &plan), OK, NULL);
    if (!plan) return c_check_result("bad_input_offsets_gpu");

    L = calloc(1, sizeof *L);
    fill_bf16(L->xs, R * H, 1.0);
    fill_bf16(L->wg, E * I * H, 0.25);
    fill_bf16(L->wu, E * I * H, 0.25);
    fill_bf16(L->wd, E * H * I, 0.25);
    fill_bf16(L->dys, R * H, 1.0);
    for (k = 0; k < R; ++k) L->w[k] = (float)(0.5 + 0.5 * uniform());
    CHECK_STATUS(moejit_plan_experts_saved_size(plan, R, &L->saved), OK, NULL);
    CHECK_STATUS(moejit_plan_experts_workspace_size(plan, R, &L->work), OK, NULL);
    L->d_xs = c_cuda_alloc(sizeof L->xs), L->d_dys = c_cuda_alloc(sizeof L->dys);
    L->d_wg = c_cuda_alloc(sizeof L->wg), L->d_wu = c_cuda_alloc(sizeof L->wu), L->d_wd = c_cuda_alloc(sizeof L->wd);
    L->d_w = c_cuda_alloc(sizeof L->w), L->d_offsets = c_cuda_alloc(sizeof(int32_t) * (E + 1));
    L->d_ys = c_cuda_alloc(R * H * 2), L->d_dxs = c_cuda_alloc(R * H * 2), L->d_dw = c_cuda_alloc(R * 4);
    L->d_dwg = c_cuda_alloc(E * I * H * 2), L->d_dwu = c_cuda_alloc(E * I * H * 2), L->d_dwd = c_cuda_alloc(E * H * I * 2);
    L->d_saved = c_cuda_alloc(L->saved), L->d_work = c_cuda_alloc(L->work);
    c_cuda_put(L->d_xs, L->xs, sizeof L->xs);
    c_cuda_put(L->d_dys, L->dys, sizeof L->dys);
    c_cuda_put(L->d_wg, L->wg, sizeof L->wg);
    c_cuda_put(L->d_wu, L->wu, sizeof L->wu);
    c_cuda_put(L->d_wd, L->wd, sizeof L->wd);
    c_cuda_put(L->d_w, L->w, sizeof L->w);

    run_case(c, plan, L, valid, "well-formed");
    run_case(c, plan, L, issue_case, "issue 29");
    run_case(c, plan, L, valid_short, "well-formed, offsets[E] < R");
    for (k = 0; k < 12; ++k) {
        int32_t x[E + 1];
        char name[32];
        for (e = 0; e <= E; ++e) {
            switch (rand() % 6) {
            case 0: x[e] = INT32_MIN; break;
            case 1: x[e] = INT32_MAX; break;
            case 2: x[e] = -1 - rand() % 1000; break;
            case 3: x[e] = R + 1 + rand() % 1000; break;
            default: x[e] = rand() % (R + 1); break;
            }
        }
        if (k % 3 == 0) x[0] = 0; /* some start right and go wrong later */
        snprintf(name, sizeof name, "random %d", k);
        run_case(c, plan, L, x, name);
    }
    run_zero_rows(c, plan, L);
    /* The context still works: a well-formed call on it matches its reference, flag clear. */
    run_case(c, plan, L, valid, "well-formed again");
    CHECK_STATUS(moejit_context_device_errors(c, 1, &errors), OK, NULL);
    CHECK(errors == 0);
    CHECK_STATUS(moejit_context_device_errors(c, 1, NULL), MOEJIT_ERROR_INVALID_ARGUMENT, "errors");
    CHECK_STATUS(moejit_context_device_errors(NULL, 1, &errors), MOEJIT_ERROR_INVALID_ARGUMENT, "context");

    {
        void *all[] = {L->d_xs, L->d_dys, L->d_wg, L->d_wu, L->d_wd, L->d_w, L->d_offsets, L->d_ys, L->d_dxs,
                       L->d_dw, L->d_dwg, L->d_dwu, L->d_dwd, L->d_saved, L->d_work};
        for (k = 0; k < (int)(sizeof all / sizeof all[0]); ++k) c_cuda_free(all[k]);
    }
    free(L);
    moejit_plan_destroy(plan);
    moejit_context_destroy(c);
    return c_check_result("bad_input_offsets_gpu");
}
