/* A caller built against moejit 0.1.0's header (tests/abi/moejit_0_1/, verbatim), run against
 * the current library (issue 16 item 3). Built twice by tests/meson.build: linked against the
 * current library (versioned references), and linked against an unversioned stand-in with the
 * same soname (tests/abi/stub_0_1.c), as a binary built before 0.4 is, then run against the
 * current library: its unversioned references must bind to the MOEJIT_0.1 node.
 * Needs no GPU; on a GPU host it also runs a real plan's backward with the 0.1 struct (T = 0).
 * On 0.3.0: the T > 0 check fails (no args->x message) and, on a GPU, the backward fails with
 * "args->struct_size is 152, expected 160 (... a header newer than the library ...)".
 * On 0.10.0: moejit_backward_args_init wrote 160 bytes into this 152-byte struct (its guard
 * bytes changed) and set struct_size 160, not 153.
 */
#include "moejit.h" /* the 0.1.0 header: include path tests/abi/moejit_0_1 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../c_check.h"
#include "../c_cuda.h"

#if MOEJIT_VERSION_MINOR != 1 || MOEJIT_VERSION_MAJOR != 0
#error "built against the wrong header: expected moejit 0.1.0's"
#endif

#define GUARD 0xA5

/* The 0.1 struct, followed by guard bytes the library must never touch. */
struct guarded_backward {
    moejit_backward_args_t args;
    unsigned char guard[64];
};
struct guarded_options {
    moejit_context_options_t options;
    unsigned char guard[64];
};

static int guard_intact(const unsigned char *g, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (g[i] != GUARD) return 0;
    return 1;
}

/* On a GPU: a real plan's backward with the 0.1 struct, T = 0 (weight gradients only: zeros). */
static void backward_on_gpu(void) {
    moejit_context_t context = NULL;
    moejit_plan_desc_t desc;
    moejit_plan_t plan = NULL;
    moejit_backward_args_t b;
    size_t saved = 0, work = 0;
    const size_t wb = 4 * 64 * 64 * 2;
    void *w[3], *dw[3], *dsaved, *dwork;
    int i;
    if (moejit_context_create(NULL, &context) != MOEJIT_SUCCESS || !c_cuda_open()) {
        printf("no usable GPU: the plan part is skipped (%s)\n", moejit_last_error());
        moejit_context_destroy(context);
        return;
    }
    moejit_plan_desc_init(&desc);
    desc.hidden_size = 64;
    desc.intermediate_size = 64;
    desc.num_experts = 4;
    desc.top_k = 2;
    CHECK_STATUS(moejit_plan_create(context, &desc, &plan), MOEJIT_SUCCESS, NULL);
    CHECK_STATUS(moejit_plan_saved_size(plan, 0, &saved), MOEJIT_SUCCESS, NULL);
    CHECK_STATUS(moejit_plan_workspace_size(plan, 0, &work), MOEJIT_SUCCESS, NULL);
    for (i = 0; i < 3; ++i) {
        w[i] = c_cuda_alloc(wb);
        dw[i] = c_cuda_alloc(wb);
    }
    dsaved = c_cuda_alloc(saved);
    dwork = c_cuda_alloc(work);
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b; /* 152: 0.1's */
    b.num_tokens = 0;
    b.w_gate = w[0];
    b.w_up = w[1];
    b.w_down = w[2];
    b.dw_gate = dw[0];
    b.dw_up = dw[1];
    b.dw_down = dw[2];
    b.saved = dsaved;
    b.saved_size = saved;
    b.workspace = dwork;
    b.workspace_size = work;
    CHECK_STATUS(moejit_plan_backward(plan, &b), MOEJIT_SUCCESS, NULL);
    moejit_plan_destroy(plan);
    for (i = 0; i < 3; ++i) {
        c_cuda_free(w[i]);
        c_cuda_free(dw[i]);
    }
    c_cuda_free(dsaved);
    c_cuda_free(dwork);
    moejit_context_destroy(context);
}

int main(void) {
    printf("caller built against moejit %s, running with library %s\n", MOEJIT_VERSION_STRING, moejit_version());
    CHECK(sizeof(moejit_backward_args_t) == 152); /* 0.1's: no x (LP64) */
    CHECK(moejit_version_number() >= 300);

    /* 0.1's context options (56 bytes, before 0.6's switches): the unsized legacy init writes
     * exactly them, and a context is created from them (the switches from the environment). */
    {
        struct guarded_options g;
        moejit_context_t context = NULL;
        memset(&g, GUARD, sizeof g);
        CHECK_STATUS(moejit_context_options_init(&g.options), MOEJIT_SUCCESS, NULL);
        CHECK(g.options.struct_size == sizeof(moejit_context_options_t));
        CHECK(guard_intact(g.guard, sizeof g.guard));
        g.options.compile_only = 1;
        g.options.arch = "sm_90a";
        g.options.cache_dir = ""; /* memory only */
        CHECK_STATUS(moejit_context_create(&g.options, &context), MOEJIT_SUCCESS, NULL);
        CHECK(context != NULL);

        /* A 0.1 desc is accepted: the failure is the bad field's, not the struct's. */
        {
            moejit_plan_desc_t desc;
            int kernels = -1;
            CHECK_STATUS(moejit_plan_desc_init(&desc), MOEJIT_SUCCESS, NULL);
            desc.hidden_size = 0;
            desc.intermediate_size = 64;
            desc.num_experts = 4;
            desc.top_k = 2;
            CHECK_STATUS(moejit_plan_warmup(context, &desc, &kernels), MOEJIT_ERROR_INVALID_ARGUMENT,
                         "desc->hidden_size");
        }
        moejit_context_destroy(context);
    }

    /* 0.1's backward args (152 bytes, no x), set up the documented way for a caller that cannot
     * rely on the library's size: zeroed, struct_size = its own sizeof. */
    {
        struct guarded_backward g;
        memset(&g, GUARD, sizeof g);
        memset(&g.args, 0, sizeof g.args);
        g.args.struct_size = sizeof g.args;
        g.args.num_tokens = 0;

        /* T = 0 needs no x: the struct is accepted and the next check is the plan handle. On
         * 0.3.0: "args->struct_size is 152, expected 160 (... header newer ...)". */
        CHECK_STATUS(moejit_plan_backward(NULL, &g.args), MOEJIT_ERROR_INVALID_ARGUMENT, "plan is NULL");
        CHECK(strstr(moejit_last_error(), "struct_size") == NULL);

        /* T > 0 needs the forward's x, which a 0.1 struct cannot carry: named as args->x. */
        g.args.num_tokens = 4;
        CHECK_STATUS(moejit_plan_backward(NULL, &g.args), MOEJIT_ERROR_INVALID_ARGUMENT, "args->x");
        CHECK(guard_intact(g.guard, sizeof g.guard));

        /* Forward args did not change since 0.1: accepted too. */
        {
            moejit_forward_args_t f;
            CHECK_STATUS(moejit_forward_args_init(&f), MOEJIT_SUCCESS, NULL);
            CHECK_STATUS(moejit_plan_forward(NULL, &f), MOEJIT_ERROR_INVALID_ARGUMENT, "plan is NULL");
        }
    }

    /* The unsized legacy backward init (what this binary's moejit_backward_args_init is, linked
     * either way) writes 0.1's 152 bytes and not one more (issue 29 item 4; 0.4-0.10 wrote 160,
     * 8 bytes past this struct), and marks struct_size 153 (no header's size). */
    {
        struct guarded_backward g;
        memset(&g, GUARD, sizeof g);
        CHECK_STATUS(moejit_backward_args_init(&g.args), MOEJIT_SUCCESS, NULL);
        CHECK(g.args.struct_size == 153);
        CHECK(g.args.num_tokens == 0 && g.args.dout == NULL && g.args.stream == NULL);
        CHECK(guard_intact(g.guard, sizeof g.guard));
        /* Accepted as it is: T = 0 reads nothing past the 152 bytes; the next check is the plan. */
        CHECK_STATUS(moejit_plan_backward(NULL, &g.args), MOEJIT_ERROR_INVALID_ARGUMENT, "plan is NULL");
        CHECK(guard_intact(g.guard, sizeof g.guard));
    }
    /* The same init, as a binary built against a 0.2/0.3 header calls it (same unversioned
     * symbol): its struct is 160 bytes with x at offset 152. The init leaves x to the caller, and
     * the backward reads the x it set when T > 0, so those binaries keep working. */
    {
        union {
            moejit_backward_args_t args; /* aligns the bytes */
            unsigned char bytes[160 + 64];
        } u;
        unsigned char *buf = u.bytes;
        moejit_backward_args_t *b = &u.args;
        const void *x = (const void *)(uintptr_t)0x7f0000001000u;
        memset(buf, GUARD, sizeof u.bytes);
        CHECK_STATUS(moejit_backward_args_init(b), MOEJIT_SUCCESS, NULL);
        CHECK(b->struct_size == 153);
        CHECK(guard_intact(buf + 152, sizeof u.bytes - 152));
        b->num_tokens = 4;
        memset(buf + 152, 0, sizeof x); /* x = NULL: named, with why */
        CHECK_STATUS(moejit_plan_backward(NULL, b), MOEJIT_ERROR_INVALID_ARGUMENT, "args->x is NULL");
        CHECK(strstr(moejit_last_error(), "unsized moejit_backward_args_init") != NULL);
        memcpy(buf + 152, &x, sizeof x); /* the 0.2/0.3 caller sets x */
        CHECK_STATUS(moejit_plan_backward(NULL, b), MOEJIT_ERROR_INVALID_ARGUMENT, "plan is NULL");
        CHECK(guard_intact(buf + 160, sizeof u.bytes - 160));
    }
    backward_on_gpu();
    return c_check_result("old_caller_0_1");
}
