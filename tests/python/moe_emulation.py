"""A float32 emulation of the library's layer for the CPU tests of the custom ops: install()
replaces moejit._op._forward / _backward (the functions that launch the library) by
fake_forward / fake_backward below and lets CPU tensors pass the "must be a CUDA tensor"
check, so everything else (the wrappers, schemas, fake implementations, autograd, main_grad)
is the real binding.

The emulation covers every layer the ops describe: split, merged or interleaved fc1, the
weights as [E, 2I, H] / [E, H, I] or transposed (x·W), expert biases, the swiglu and gpt-oss
activations with their limit. Its gradients are written out by hand (not autograd), so a test
that compares it with an autograd reference checks both."""

import torch

from moejit import _op
from moejit._validate import TensorInfo


def split_fc1(t, interleaved, dim):
    """(gate, up) halves of fc1's 2I dim `dim`, in fc1's column order."""
    if interleaved:
        index = torch.arange(t.shape[dim], device=t.device)
        return t.index_select(dim, index[0::2]), t.index_select(dim, index[1::2])
    half = t.shape[dim] // 2
    return t.narrow(dim, 0, half), t.narrow(dim, half, half)


def join_fc1(gate, up, interleaved, dim):
    """split_fc1's inverse."""
    if interleaved:
        return torch.stack([gate, up], dim + 1).flatten(dim, dim + 1)
    return torch.cat([gate, up], dim)


def _canonical(spec, w_gate, w_up, w_gate_up, w_down, b_gate_up, b_down):
    """float32 wg, wu [E, I, H], wd [E, H, I], bg, bu [E, I], bd [E, H] (biases None)."""
    if w_gate_up is not None:
        wgu = w_gate_up.float()
        if spec.weights_transposed:
            wgu = wgu.transpose(1, 2)
        wg, wu = split_fc1(wgu, spec.interleaved, 1)
    else:
        wg, wu = w_gate.float(), w_up.float()
    wd = w_down.float()
    if spec.weights_transposed:
        wd = wd.transpose(1, 2)
    bg = bu = bd = None
    if b_gate_up is not None:
        bg, bu = split_fc1(b_gate_up.float(), spec.interleaved, 1)
        bd = b_down.float()
    return wg, wu, wd, bg, bu, bd


def _activation(spec, g, u):
    """h and its partial derivatives in g and u (the limit's masks included)."""
    limit = spec.swiglu_limit
    gc, uc = (g.clamp(max=limit), u.clamp(-limit, limit)) if limit else (g, u)
    if spec.activation == "gpt_oss":
        sig = torch.sigmoid(spec.alpha * gc)
        h = (uc + 1) * gc * sig
        dh_dg = (uc + 1) * (sig + spec.alpha * gc * sig * (1 - sig))
        dh_du = gc * sig
    else:
        sig = torch.sigmoid(gc)
        h = gc * sig * uc
        dh_dg = uc * sig * (1 + gc * (1 - sig))
        dh_du = gc * sig
    if limit:
        dh_dg = dh_dg * (g <= limit)
        dh_du = dh_du * (u.abs() <= limit)
    return h, dh_dg, dh_du


def _routes(spec, x, sel, rw, w_gate, w_up, w_gate_up, w_down, b_gate_up, b_down):
    """Per-route float32 intermediates, [T, k, ...]."""
    hidden, k = x.shape[-1], sel.shape[-1]
    xf = x.reshape(-1, hidden).float()
    s = sel.reshape(-1, k).long()
    r = rw.reshape(-1, k).float()
    wg, wu, wd, bg, bu, bd = _canonical(spec, w_gate, w_up, w_gate_up, w_down, b_gate_up,
                                        b_down)
    wg, wu, wd = wg[s], wu[s], wd[s]                      # [T,k,I,H], [T,k,I,H], [T,k,H,I]
    g = torch.einsum("th,tkih->tki", xf, wg)
    u = torch.einsum("th,tkih->tki", xf, wu)
    if bg is not None:
        g, u = g + bg[s], u + bu[s]
    h, dh_dg, dh_du = _activation(spec, g, u)
    y = torch.einsum("tki,tkhi->tkh", h, wd)
    if bd is not None:
        y = y + bd[s]
    return dict(xf=xf, s=s, r=r, wg=wg, wu=wu, wd=wd, h=h, dh_dg=dh_dg, dh_du=dh_du, y=y)


def fake_forward(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down, swiglu_limit, **gated):
    spec = _op.check(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down, swiglu_limit, **gated)
    v = _routes(spec, x, sel, rw, w_gate, w_up, w_gate_up, w_down, gated.get("b_gate_up"),
                gated.get("b_down"))
    out = (v["r"].unsqueeze(-1) * v["y"]).sum(1).to(x.dtype).reshape(x.shape)
    saved = torch.zeros(_op._saved_bound(spec), dtype=torch.uint8, device=x.device)
    return out, saved


def fake_backward(where, dout, x, sel, rw, w_gate, w_up, w_gate_up, w_down, saved,
                  swiglu_limit, main_grads=None, **gated):
    spec = _op._backward_common(where, dout, x, sel, rw, w_gate, w_up, w_gate_up, w_down, saved,
                                swiglu_limit, main_grads, **gated)
    v = _routes(spec, x, sel, rw, w_gate, w_up, w_gate_up, w_down, gated.get("b_gate_up"),
                gated.get("b_down"))
    d = dout.reshape(v["xf"].shape).float()
    drw = torch.einsum("th,tkh->tk", d, v["y"])
    dy = v["r"].unsqueeze(-1) * d.unsqueeze(1)                            # [T,k,H]
    dh = torch.einsum("tkh,tkhi->tki", dy, v["wd"])
    dg, du = dh * v["dh_dg"], dh * v["dh_du"]
    dx = torch.einsum("tki,tkih->th", dg, v["wg"]) + torch.einsum("tki,tkih->th", du, v["wu"])
    n_exp = w_down.shape[0]

    def per_expert(routes):  # [T,k,...] -> [E,...], summed over each expert's routes
        out = torch.zeros((n_exp,) + routes.shape[2:], dtype=torch.float32,
                          device=routes.device)
        return out.index_add(0, v["s"].reshape(-1), routes.reshape((-1,) + routes.shape[2:]))

    dwd = per_expert(torch.einsum("tkh,tki->tkhi", dy, v["h"]))           # [E,H,I]
    dwg = per_expert(torch.einsum("tki,th->tkih", dg, v["xf"]))           # [E,I,H]
    dwu = per_expert(torch.einsum("tki,th->tkih", du, v["xf"]))
    if spec.weights_transposed:
        dwd = dwd.transpose(1, 2).contiguous()
    grads = {"w_down": dwd}
    if w_gate_up is not None:
        dwgu = join_fc1(dwg, dwu, spec.interleaved, 1)
        grads["w_gate_up"] = dwgu.transpose(1, 2).contiguous() if spec.weights_transposed \
            else dwgu
    else:
        grads["w_gate"], grads["w_up"] = dwg, dwu
    if spec.has_bias:
        grads["b_gate_up"] = join_fc1(per_expert(dg), per_expert(du), spec.interleaved, 1)
        grads["b_down"] = per_expert(dy)
    dx = dx.to(x.dtype).reshape(x.shape)
    drw = drw.to(rw.dtype).reshape(rw.shape)
    if main_grads is not None:
        for name, g32 in grads.items():
            main_grads[name].add_(g32)
        return dx, drw, {}
    out = {n: g32.to(w_down.dtype) for n, g32 in grads.items()}
    if "w_gate" in out:  # the library's split gradients: halves of one block (_op._new_grads)
        out[_op._FC1_PAIR] = torch.stack((out["w_gate"], out["w_up"]))
        out["w_gate"], out["w_up"] = out[_op._FC1_PAIR].unbind(0)
    return dx, drw, out


def _rows_as_routes(xs, offsets, rw):
    """The pre-dispatched experts' rows as a layer of one route per row: the expert id of each
    row (from the offsets) [R, 1] int32 and its weight [R, 1] float32 (1 without weights)."""
    rows = xs.shape[0]
    ids = torch.searchsorted(offsets[1:].long(), torch.arange(rows, device=xs.device),
                             right=True)
    weights = rw if rw is not None else torch.ones(rows, device=xs.device)
    return ids.to(torch.int32).view(rows, 1), weights.float().view(rows, 1)


def fake_experts_forward(where, xs, offsets, rw, w_gate_up, w_down, swiglu_limit, **gated):
    """moejit._experts_op._forward emulated: the layer's emulation, one route per row."""
    from moejit import _experts_op
    spec = _experts_op.check(where, xs, offsets, rw, w_gate_up, w_down, swiglu_limit, **gated)
    sel, weights = _rows_as_routes(xs, offsets, rw)
    ys, _ = fake_forward(where, xs, sel, weights, None, None, w_gate_up, w_down, swiglu_limit,
                         **gated)
    return ys, torch.zeros(_experts_op._saved_bound(spec), dtype=torch.uint8, device=xs.device)


def fake_experts_backward(where, dys, xs, offsets, rw, w_gate_up, w_down, saved, swiglu_limit,
                          **gated):
    from moejit import _experts_op
    _experts_op._backward_check(where, dys, xs, offsets, rw, w_gate_up, w_down, saved,
                                swiglu_limit, **gated)
    sel, weights = _rows_as_routes(xs, offsets, rw)
    spec = _op.check(where, xs, sel, weights, None, None, w_gate_up, w_down, swiglu_limit,
                     **gated)
    layer_saved = torch.zeros(_op._saved_bound(spec), dtype=torch.uint8, device=xs.device)
    dxs, drw, grads = fake_backward(where, dys, xs, sel, weights, None, None, w_gate_up, w_down,
                                    layer_saved, swiglu_limit, **gated)
    return dxs, (drw.reshape(-1) if rw is not None else None), grads


def cpu_as_cuda(real_info):
    """_op._info that lets CPU tensors through the device check (as cuda:0)."""
    def info(where, name, tensor):
        i = real_info(where, name, tensor)
        if i is not None and i.device == "cpu":
            i = TensorInfo(i.shape, i.dtype, "cuda:0", i.contiguous)
        return i
    return info


def install(monkeypatch):
    """Replaces the library's launches by the emulation (for one test, through pytest's
    monkeypatch) and lets CPU tensors through the device check."""
    monkeypatch.setattr(_op, "_info", cpu_as_cuda(_op._info))
    monkeypatch.setattr(_op, "_forward", fake_forward)
    monkeypatch.setattr(_op, "_backward", fake_backward)
    from moejit import _experts_op
    monkeypatch.setattr(_experts_op, "_forward", fake_experts_forward)
    monkeypatch.setattr(_experts_op, "_backward", fake_experts_backward)
