/* A layer's plan description and the backward arguments that go with a forward call's (C99
 * and C++, header only).
 *
 * layer_desc_init(): moejit_plan_desc_init's defaults with the layer's shape.
 *
 * moejit_plan_backward re-reads what moejit_plan_forward was given: the same tokens x, routing
 * weights, weights (and b_down), the saved buffer the forward wrote, a workspace and the stream.
 * layer_backward_args() initializes a backward struct and copies those from the forward's, so a
 * caller names them once and adds only what is the backward's own: dout and the gradients'
 * buffers (dx, d_routing_weights, dw_*, db_*). Used by forward_backward.c, moejit-bench and the
 * tests. */
#ifndef MOEJIT_EXAMPLES_LAYER_ARGS_H
#define MOEJIT_EXAMPLES_LAYER_ARGS_H

#include "moejit.h"

static inline moejit_status_t layer_desc_init(moejit_plan_desc_t *d, int64_t hidden_size, int64_t intermediate_size,
                                              int32_t num_experts, int32_t top_k) {
    const moejit_status_t status = moejit_plan_desc_init(d);
    d->hidden_size = hidden_size, d->intermediate_size = intermediate_size;
    d->num_experts = num_experts, d->top_k = top_k;
    return status;
}

static inline moejit_status_t layer_backward_args(const moejit_forward_args_t *f, moejit_backward_args_t *b) {
    const moejit_status_t status = moejit_backward_args_init(b);
    b->num_tokens = f->num_tokens;
    b->x = f->x;
    b->routing_weights = f->routing_weights;
    b->w_gate = f->w_gate, b->w_up = f->w_up, b->w_gate_up = f->w_gate_up;
    b->w_down = f->w_down;
    b->b_down = f->b_down; /* d_routing_weights needs it; b_gate_up is not read */
    b->saved = f->saved, b->saved_size = f->saved_size;
    b->workspace = f->workspace, b->workspace_size = f->workspace_size;
    b->stream = f->stream;
    return status;
}

#endif
