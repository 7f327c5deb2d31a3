"""The float32 emulation of moejit's launches that the transformers tests run on the CPU
(test_transformers_emulated.py, test_transformers_refusals.py; conftest.py's fixtures emulated
and extended): reference_layer, the MoE layer in float32; Emulation, the library's launches
replaced by it; ExtendedCall, moejit.torch.fused_moe_merged's extended signature emulated."""

import torch
import torch.nn.functional as F

from moejit import _op
from moejit._validate import TensorInfo
from moejit.integrations import transformers as mjt


def reference_layer(x, sel, rw, w1, w2, *, activation="swiglu", limit=0.0, alpha=1.702,
                    interleaved=False, transposed=False, b1=None, b2=None):
    """out [T, H] in float32 of the MoE layer; differentiable in every float input. Ids
    outside [0, E) are dropped routes (contribute nothing, get no gradient)."""
    hidden = x.shape[-1]
    k = sel.shape[-1]
    experts = w1.shape[0]
    xf = x.reshape(-1, hidden).float()
    s = sel.reshape(-1, k).long()
    valid = (s >= 0) & (s < experts)
    s = s.clamp(0, experts - 1)
    r = rw.reshape(-1, k).float() * valid
    w1f = w1.float()[s]   # [T,k,2I,H] or [T,k,H,2I]
    w2f = w2.float()[s]   # [T,k,H,I] or [T,k,I,H]

    def per_route(inp, wf, bias, plain, trans):
        """inp times each route's weight (einsum `plain` for [out, in] weights, `trans` for
        [in, out]), plus the route's bias row."""
        out = torch.einsum(trans if transposed else plain, inp, wf)
        return out if bias is None else out + bias.float()[s]

    h = per_route(xf, w1f, b1, "th,tkjh->tkj", "th,tkhj->tkj")
    if interleaved:
        g, u = h[..., 0::2], h[..., 1::2]
    else:
        g, u = h.chunk(2, dim=-1)
    if limit:
        g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    if activation == "gpt_oss":
        a = (u + 1) * g * torch.sigmoid(alpha * g)
    else:
        a = F.silu(g) * u
    y = per_route(a, w2f, b2, "tki,tkhi->tkh", "tki,tkih->tkh")
    return (r.unsqueeze(-1) * y).sum(1)


class Emulation:
    """Replaces the library's launches (moejit._op._forward / _backward) by reference_layer;
    counts the calls and records the weight data pointers the op received."""

    def __init__(self, monkeypatch, swap_gate_up=False, allow_float32=False):
        self.forward_calls = 0
        self.backward_calls = 0
        self.weight_ptrs = []
        self.swap = swap_gate_up
        real_info = _op._info

        def info(where, name, tensor):
            i = real_info(where, name, tensor)
            if i is not None and i.device == "cpu":
                i = TensorInfo(i.shape, i.dtype, "cuda:0", i.contiguous)
            if i is not None and allow_float32 and i.dtype == "float32":
                i = TensorInfo(i.shape, "bfloat16", i.device, i.contiguous)
            return i
        monkeypatch.setattr(_op, "_info", info)
        monkeypatch.setattr(_op, "_forward", self.forward)
        monkeypatch.setattr(_op, "_backward", self.backward)
        monkeypatch.setattr(mjt, "_device_supported", lambda t: t.device.type in ("cpu", "cuda"))
        if allow_float32:  # a float32 model runs through the op (emulated in float32)
            monkeypatch.setattr(mjt, "_FLOAT_DTYPES", mjt._FLOAT_DTYPES + (torch.float32,))

    def _w1(self, w_gate_up):
        if not self.swap:
            return w_gate_up
        g, u = w_gate_up.chunk(2, dim=1)
        return torch.cat([u, g], 1)

    def forward(self, where, x, sel, rw, w_gate, w_up, w_gate_up, w_down, swiglu_limit, *extra):
        assert w_gate_up is not None and not extra, "the integration uses the merged layout"
        self.forward_calls += 1
        self.weight_ptrs.append((w_gate_up.data_ptr(), w_down.data_ptr()))
        out = reference_layer(x, sel, rw, self._w1(w_gate_up), w_down, limit=swiglu_limit)
        hidden, k = x.shape[-1], sel.shape[-1]
        tokens = x.numel() // hidden
        saved = torch.zeros(_op.saved_bytes_bound(tokens, hidden, w_down.shape[2],
                                                  w_down.shape[0], k),
                            dtype=torch.uint8, device=x.device)
        return out.to(x.dtype).reshape(x.shape), saved

    def backward(self, where, dout, x, sel, rw, w_gate, w_up, w_gate_up, w_down, saved,
                 swiglu_limit, main_grads=None, *extra):
        assert main_grads is None and not extra
        self.backward_calls += 1
        # torch.func.vjp: the ops' implementations run below the Autograd dispatch key.
        leaves = [t.detach().float() for t in (x, rw, w_gate_up, w_down)]
        out, vjp = torch.func.vjp(
            lambda xx, rr, w1, w2: reference_layer(xx, sel, rr, self._w1(w1), w2,
                                                   limit=swiglu_limit), *leaves)
        dx, drw, dw1, dw2 = vjp(dout.reshape(out.shape).float())
        return (dx.to(x.dtype).reshape(x.shape), drw.to(rw.dtype).reshape(rw.shape),
                {"w_gate_up": dw1.to(w_gate_up.dtype), "w_down": dw2.to(w_down.dtype)})


class ExtendedCall:
    """moejit.torch.fused_moe_merged with the extended (0.5) signature, as a float32 autograd
    reference: what the integration calls for gpt-oss. Records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, x, selected_experts, routing_weights, w_gate_up, w_down,
                 swiglu_limit=None, *, main_grads=None, activation="swiglu", alpha=None,
                 interleaved=False, weights_transposed=False, b_gate_up=None, b_down=None):
        assert main_grads is None
        self.calls.append(dict(x=x, sel=selected_experts, rw=routing_weights, w1=w_gate_up,
                               w2=w_down, limit=swiglu_limit, activation=activation,
                               alpha=alpha, interleaved=interleaved,
                               transposed=weights_transposed, b1=b_gate_up, b2=b_down))
        out = reference_layer(x, selected_experts, routing_weights, w_gate_up, w_down,
                              activation=activation, limit=swiglu_limit or 0.0,
                              alpha=alpha if alpha is not None else 1.702,
                              interleaved=interleaved, transposed=weights_transposed,
                              b1=b_gate_up, b2=b_down)
        return out.to(x.dtype)
