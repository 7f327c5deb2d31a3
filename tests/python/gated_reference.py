"""The float64 reference of the gated layer (moejit.torch.fused_moe_merged with activation,
alpha, interleaved, weights_transposed and biases), written the way transformers'
GptOssExperts computes gpt-oss's experts, and differentiated by autograd; plus the inputs and
routing cases shared by test_torch_op_gated_emulated.py (CPU) and
test_torch_op_gated_gpu.py."""

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
GPT_OSS_ALPHA = 1.702

# The layers under test. fc1_scale widens fc1's outputs (std ≈ fc1_scale) so that a limit of
# 7 clamps a good share of them (about 8 % of the gates, 16 % of the ups at 5).
CONFIGS = {
    "gpt_oss": dict(activation="gpt_oss", alpha=None, limit=7.0, interleaved=True,
                    transposed=True, bias=True, fc1_scale=5.0),
    "merged_bias_swiglu": dict(activation="swiglu", alpha=None, limit=None, interleaved=False,
                               transposed=False, bias=True, fc1_scale=1.0),
    "gpt_oss_merged_alpha": dict(activation="gpt_oss", alpha=1.3, limit=0.75,
                                 interleaved=False, transposed=False, bias=False,
                                 fc1_scale=1.0),
    "swiglu_interleaved_transposed": dict(activation="swiglu", alpha=None, limit=0.75,
                                          interleaved=True, transposed=True, bias=False,
                                          fc1_scale=1.0),
}

# (tokens, how experts are chosen): "mixed": random with the last expert never chosen and
# every third token's top-k holding one expert twice; "one_expert": every route of every
# token to expert 1 (so every top-k is one expert k times, the others empty).
ROUTINGS = {
    "mixed": (24, "mixed"),
    "one_expert": (24, "one_expert"),
    "T1": (1, "mixed"),
    "T0": (0, "mixed"),
}


def routing(tokens, how, num_experts, top_k, generator, device):
    if how == "one_expert":
        return torch.full((tokens, top_k), 1, dtype=torch.int64, device=device)
    sel = torch.randint(0, num_experts - 1, (tokens, top_k), generator=generator,
                        device=device)
    if top_k > 1:
        sel[::3, 1] = sel[::3, 0]  # duplicate routes (token 0 among them)
    return sel


def gated_inputs(config, routing_case, *, E, H, I, K, device="cpu", seed=0, dtype=BF16,
                 rw_dtype=torch.float32, index_dtype=torch.int64, tokens=None):
    """x [T, H], selected_experts, routing_weights [T, K], the weights in the config's layout,
    the biases (or None) and an output gradient, all freshly drawn (never zeros). tokens
    overrides the routing case's T."""
    c = CONFIGS[config]
    case_tokens, how = ROUTINGS[routing_case]
    tokens = case_tokens if tokens is None else tokens
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

    x = randn(tokens, H)
    sel = routing(tokens, how, E, K, g, device).to(index_dtype)
    rw = (torch.rand(tokens, K, generator=g, device=device) + 0.05).to(rw_dtype)
    w_gate_up, w_down, b_gate_up, b_down = random_weights(c, randn, E=E, H=H, I=I)
    dout = randn(tokens, H)
    return x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout


def random_weights(c, randn, *, E, H, I):
    """w_gate_up and w_down in config c's layout, and the biases (None without): drawn with
    randn(*shape, scale=)."""
    fc1 = (E, H, 2 * I) if c["transposed"] else (E, 2 * I, H)
    down = (E, I, H) if c["transposed"] else (E, H, I)
    w_gate_up = randn(*fc1, scale=c["fc1_scale"] * H ** -0.5)
    w_down = randn(*down, scale=I ** -0.5)
    b_gate_up = randn(E, 2 * I, scale=0.5) if c["bias"] else None
    b_down = randn(E, H, scale=0.5) if c["bias"] else None
    return w_gate_up, w_down, b_gate_up, b_down


def run_merged(config, x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout, main_grads=None):
    """The public call (moejit.torch.fused_moe_merged with the config's options) and its
    backward: (out, [dx, drw, dw_gate_up, dw_down, db_gate_up, db_down]), None for what has no
    .grad."""
    import moejit.torch as mt

    tensors = [x, rw, w_gate_up, w_down, b_gate_up, b_down]
    leaves = [None if t is None else t.clone().requires_grad_() for t in tensors]
    out = mt.fused_moe_merged(leaves[0], sel, leaves[1], leaves[2], leaves[3],
                              CONFIGS[config]["limit"], b_gate_up=leaves[4], b_down=leaves[5],
                              main_grads=main_grads, **call_kwargs(config))
    out.backward(dout)
    if x.is_cuda:
        torch.cuda.synchronize()
    return out.detach(), [None if t is None else t.grad for t in leaves]


def call_kwargs(config):
    """fused_moe_merged's keyword arguments for a config (biases apart)."""
    c = CONFIGS[config]
    return dict(activation=c["activation"], alpha=c["alpha"], interleaved=c["interleaved"],
                weights_transposed=c["transposed"])


def reference(x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, *, activation, alpha, limit,
              interleaved, transposed, round_fc1_to=None):
    """float64 forward, differentiable in every float input. round_fc1_to: round fc1's output
    (bias included) to that dtype before the activation, as the library keeps g and u in the
    layer dtype (its limit masks see those values)."""
    if alpha is None:
        alpha = GPT_OSS_ALPHA
    # As gpt-oss stores them: gate_up_proj [E, H, 2I], down_proj [E, I, H].
    w_gu = w_gate_up if transposed else w_gate_up.transpose(1, 2)
    w_dn = w_down if transposed else w_down.transpose(1, 2)
    out = torch.zeros_like(x)
    for e in range(w_gu.shape[0]):
        t_idx, j_idx = torch.where(sel == e)
        if t_idx.numel() == 0:
            continue
        def stored(t):  # straight-through rounding: the gradient is not rounded
            if round_fc1_to is None:
                return t
            return t + (t.to(round_fc1_to).to(t.dtype) - t).detach()
        # The library stores fc1's GEMM output, then the biased value: two roundings.
        gate_up = stored(x[t_idx] @ w_gu[e])
        if b_gate_up is not None:
            gate_up = stored(gate_up + b_gate_up[e])
        if interleaved:
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        else:
            gate, up = gate_up.chunk(2, dim=-1)
        if limit:
            gate = gate.clamp(min=None, max=limit)
            up = up.clamp(min=-limit, max=limit)
        if activation == "gpt_oss":
            glu = gate * torch.sigmoid(gate * alpha)
            h = (up + 1) * glu
        else:
            h = F.silu(gate) * up
        y = h @ w_dn[e]
        if b_down is not None:
            y = y + b_down[e]
        out = out.index_add(0, t_idx, y * rw[t_idx, j_idx, None])
    return out


def reference_grads(config, x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout,
                    round_fc1_to=None):
    """(out, [dx, drw, dw_gate_up, dw_down, db_gate_up, db_down]) in float64 (the bias
    gradients None without biases)."""
    c = CONFIGS[config]
    tensors = [x, rw, w_gate_up, w_down, b_gate_up, b_down]
    leaves = [None if t is None else t.detach().double().requires_grad_() for t in tensors]
    out = reference(leaves[0], sel, *leaves[1:], activation=c["activation"], alpha=c["alpha"],
                    limit=c["limit"], interleaved=c["interleaved"], transposed=c["transposed"],
                    round_fc1_to=round_fc1_to)
    present = [t for t in leaves if t is not None]
    if out.requires_grad:
        grads = iter(torch.autograd.grad(out, present, dout.double(), allow_unused=True))
    else:  # no routes at all (T = 0): nothing depends on the inputs
        grads = iter([None] * len(present))
    result = []
    for t in leaves:
        if t is None:
            result.append(None)
            continue
        g = next(grads)
        result.append(torch.zeros_like(t) if g is None else g)
    return out.detach(), result


def rel(a, b, floor=0.0):
    """‖a − b‖ / max(‖b‖, floor) (‖a − b‖ when both are zero)."""
    a, b = a.double(), b.double()
    den = max(b.norm().item(), floor)
    diff = (a - b).norm().item()
    return diff / den if den > 0 else diff


def unused_experts(sel, num_experts):
    used = set(sel.reshape(-1).tolist())
    return [e for e in range(num_experts) if e not in used]


def opcheck_forward_backward(forward, backward, x, index, rw, params, options, dout,
                             consumes_saved=False, **checks):
    """torch.library.opcheck of a gated forward op called (x, index, rw, *params, *options), with
    x, rw and every param (None stays None) requiring grad, then of its backward op called (dout,
    x, index, rw, *params, saved, *options) on the forward's saved buffer, which it returns.
    checks: opcheck's keyword arguments (test_utils). consumes_saved (the layer ops, whose
    backward writes over saved): the forward's aot-dispatch test is replaced by
    compile_steps.assert_min_cut_compiles (see FORWARD_WITH_GRAD_CHECKS there)."""
    from compile_steps import FORWARD_WITH_GRAD_CHECKS, assert_min_cut_compiles

    grad = [t if t is None else t.clone().requires_grad_() for t in (x, rw, *params)]
    grad_args = (grad[0], index, grad[1], *grad[2:], *options)
    if consumes_saved:
        utils = tuple(u for u in checks.get("test_utils", FORWARD_WITH_GRAD_CHECKS)
                      if u in FORWARD_WITH_GRAD_CHECKS)
        torch.library.opcheck(forward, grad_args, **{**checks, "test_utils": utils})
        assert_min_cut_compiles(forward, grad_args, dout)
    else:
        torch.library.opcheck(forward, grad_args, **checks)
    _, saved = forward(x, index, rw, *params, *options)
    torch.library.opcheck(backward, (dout, x, index, rw, *params, saved, *options), **checks)
    return saved
