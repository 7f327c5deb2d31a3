"""The two strongest fused-MoE peers for python -m moejit_bench (issue #18): SonicMoE and QuACK.

Both are optional: a peer whose import or set-up fails is a skip line with the reason, never a
failure of the benchmark. Each is wired here from its public API, and each computes the layer of
docs/DESIGN.md section 2 on moejit's own inputs (x [T,H], selected experts [T,k], routing weights
[T,k], W_gate_up [E,2I,H] gate rows first or W_gate/W_up [E,I,H], W_down [E,H,I]):

- sonicmoe (Dao-AILab sonic-moe 0.1.2.post1, ``import sonicmoe``):
  ``sonicmoe.moe_general_routing_inputs(x, router_scores [T*k], token_indices [T*k] int32 sorted
  ascending, expert_indices [T*k] int32, w1 [2I,H,E], None, w2 [H,I,E], None, E=E, stream_id=...,
  activation_type=sonicmoe.enums.ActivationType.SWIGLU, is_inference_mode_enabled=...,
  concat_layout=True)`` -> (out [T,H], expert_frequency).
  Conventions: w1 is [E,2I,H].permute(1,2,0) and w2 [E,H,I].permute(1,2,0) (zero-copy views; the
  kernels read those strides). Gate/up: SonicMoE's default (concat_layout=False) expects the rows
  interleaved [g0,u0,g1,u1,...]; concat_layout=True takes [gate; up] = moejit's merged layout, so
  nothing is copied. Routing weight: applied AFTER fc2 (its router reduction computes
  out[t] = sum_j s[t,j] * y[t,j]); moejit applies it before fc2. Equal in exact arithmetic (fc2 is
  linear, no bias), different in rounding, hence the 2e-2 tolerance. Scores are taken in float32.
  No SwiGLU limit: the peer is skipped when --swiglu-limit is given.
  Tuning: SonicMoE calls quack.gemm_interface.gemm / gemm_gated / gemm_dgated with QuACK's
  default tuned=True, which autotunes every new shape (minutes). "sonicmoe" runs it with those
  three names rebound to tuned=False while it is checked and timed (forward and backward);
  "sonicmoe-tuned" (--sonic-tuned) runs it as shipped.
- quack (VeOmni's QuACK backend, quack-kernels 0.6.5, ``quack.gemm_interface.gemm``): the layer
  built from varlen-M grouped GEMMs as VeOmni's fused-MoE quack backend does, written here from the
  API: routes sorted by expert (stable), cu_seqlens_m [E+1] int32 group offsets, and
  fc1 = gemm(x, W1_kn [E,H,2I], cu_seqlens_m=cu, A_idx=token of each sorted route) (the gather
  is in the GEMM's A load); SwiGLU and the routing weight in PyTorch (weight applied BEFORE fc2,
  as moejit; gate = first I columns, as moejit's merged layout); fc2 = gemm(aw, W2_kn [E,I,H],
  cu_seqlens_m=cu); the k copies of each token summed in route order. Backward: dgrad with
  gemm(dY, W [E,N,K], cu_seqlens_m=cu), wgrad with gemm(dY.T, X_sorted, cu_seqlens_k=cu)
  -> [E,N,K]. The [E,K,N] copies of the weights are made once per shape, outside the timed region.
  All its GEMMs run at tuned=False ("quack"); "quack-tuned" (opt-in via --impls) leaves QuACK's
  default tuned=True, as VeOmni calls it (autotunes each new shape first).

Bringing the peers to the offline H200 (no network there): the two cannot share one
interpreter. sonic-moe 0.1.2.post1 runs on quack-kernels 0.3.11 and nvidia-cutlass-dsl 4.4.2
(it pins torch <= 2.9.1 and runs on 2.11); VeOmni's QuACK backend is quack-kernels 0.6.5 on
nvidia-cutlass-dsl 4.8.1 (>= 4.7). So each is its own set, benchmarked in its own process with
moejit beside it:
    bash bench/peers_pack.sh sonic; bash bench/peers_pack.sh quack     # here (PyPI)
    bash dev/gpu/peers.sh stash SET                                     # device, piece 1
    bash dev/gpu/peers.sh bench SET --impls moejit,sonicmoe --quick     # device, piece 2
peers_pack.sh installs each set for CPython 3.12 into a site-packages tree and packs it as
xz pieces of <= 60 MB (a device call carries 64 MiB); dev/gpu/peers.sh unpacks it under a path
containing /site-packages/ (quack >= 0.5 skips its epilogue-closure check only there) and puts
cutlass's python_packages / dsl_packages folder on PYTHONPATH (pip --target ignores its .pth).
bench/peer_targets.py merges the runs' --json files into issue 18's target table. The CuTe
DSL compiles on first use per shape (the warm-up absorbs it); nothing is downloaded at run time.
The quack peer refuses a QuACK older than 0.5 (SonicMoE's set has the same keywords), so its
rows always name the version they ran.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["PEER_IMPLS", "PeerUnavailable", "probe", "status", "prepare", "check", "rel_err",
           "reference", "run_peer"]

# impl name -> the peer it loads; "sonicmoe-tuned" is the same peer with QuACK's autotuning on
PEER_IMPLS = ("sonicmoe", "sonicmoe-tuned", "quack", "quack-tuned")
TOLERANCE = 2e-2


class PeerUnavailable(Exception):
    """The peer cannot run here (not installed, failed import, unsupported option)."""


def _import(name: str):
    return importlib.import_module(name)


def _dist_version(dist: str, module) -> str:
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:
        return str(getattr(module, "__version__", "unknown"))


def probe(impl: str) -> str:
    """Import the peer; its version string, or PeerUnavailable with the reason."""
    try:
        if impl.startswith("sonicmoe"):
            sonic = _import("sonicmoe")
            _import("sonicmoe.functional.forward")
            _import("sonicmoe.functional.backward")
            quack = _import("quack")
            return (f"sonic-moe {_dist_version('sonic-moe', sonic)} "
                    f"(quack-kernels {_dist_version('quack-kernels', quack)})")
        if impl.startswith("quack"):
            quack = _import("quack")
            _import("quack.gemm_interface")
            version = _dist_version("quack-kernels", quack)
            major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
            if major_minor < (0, 5):  # SonicMoE's 0.3.x set: same keywords, another QuACK
                raise PeerUnavailable(f"the quack peer is VeOmni's backend on quack-kernels "
                                      f">= 0.5 (wired on 0.6.5); this interpreter has {version}")
            return f"quack-kernels {version}"
    except PeerUnavailable:
        raise
    except Exception as e:  # ImportError, or a CuTe DSL / CUDA mismatch raising anything else
        raise PeerUnavailable(_reason(e)) from e
    raise PeerUnavailable(f"unknown peer {impl!r}")


def _merged_fc1(weights: Dict[str, torch.Tensor]) -> torch.Tensor:
    """W_gate_up [E,2I,H] gate rows first (a copy only for the split layout)."""
    if "w_gate_up" in weights:
        return weights["w_gate_up"].detach()
    return torch.cat([weights["w_gate"].detach(), weights["w_up"].detach()], dim=1)


def _swiglu(g, u, limit):
    if limit is not None:
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
    return F.silu(g) * u


# ---------------------------------------------------------------- SonicMoE

@contextlib.contextmanager
def _sonic_untuned():
    """Rebind the QuACK GEMM entry points SonicMoE's modules imported to tuned=False."""
    fwd = _import("sonicmoe.functional.forward")
    bwd = _import("sonicmoe.functional.backward")
    saved = []
    for mod in (fwd, bwd):
        for name in ("gemm", "gemm_gated", "gemm_dgated"):
            fn = getattr(mod, name, None)
            if fn is None:
                continue
            saved.append((mod, name, fn))
            setattr(mod, name, functools.partial(fn, tuned=False))
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def _prepare_sonic(weights, num_experts, limit, tuned):
    if limit is not None:
        raise PeerUnavailable("SonicMoE's swiglu epilogue has no SwiGLU limit")
    sonic = _import("sonicmoe")
    act = _import("sonicmoe.enums").ActivationType.SWIGLU
    # [E,2I,H] -> [2I,H,E], [E,H,I] -> [H,I,E]: views, the kernels read these strides
    w1 = _merged_fc1(weights).permute(1, 2, 0).requires_grad_()
    w2 = weights["w_down"].detach().permute(1, 2, 0).requires_grad_()
    token_idx_cache: Dict[Tuple[int, int], torch.Tensor] = {}

    def call(x, sel, rw, w1, w2):
        T, k = sel.shape
        key = (T, k)
        if key not in token_idx_cache:  # shape-only, sorted ascending as SonicMoE requires
            token_idx_cache[key] = torch.arange(T, device=x.device, dtype=torch.int32
                                                ).repeat_interleave(k)
        out, _ = sonic.moe_general_routing_inputs(
            x, rw.reshape(-1), token_idx_cache[key], sel.reshape(-1).to(torch.int32),
            w1, None, w2, None, E=num_experts,
            stream_id=torch.cuda.current_stream().cuda_stream, activation_type=act,
            is_inference_mode_enabled=not torch.is_grad_enabled(), concat_layout=True)
        return out

    def layer(x, sel, rw, swiglu_limit=None, w1=w1, w2=w2):
        return call(x, sel, rw, w1, w2)

    scope = contextlib.nullcontext() if tuned else _sonic_untuned()
    return layer, {"w1": w1, "w2": w2}, scope


# ---------------------------------------------------------------- QuACK (VeOmni's backend)

def _routes(sel: torch.Tensor, num_experts: int):
    """Sorted-route metadata: cu_seqlens_m [E+1] int32, A_idx [S] int32 (token of each sorted
    route), position [S] int64 (sorted row of each route, for the sum back in route order)."""
    flat = sel.reshape(-1).long()
    k = sel.shape[1]
    counts = torch.zeros(num_experts, dtype=torch.int64, device=sel.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    cu = torch.zeros(num_experts + 1, dtype=torch.int32, device=sel.device)
    cu[1:] = torch.cumsum(counts, 0)
    order = torch.sort(flat, stable=True).indices
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel(), device=sel.device)
    return cu, (order // k).to(torch.int32), order, position


def _route_sum(rows: torch.Tensor, position: torch.Tensor, tokens: int) -> torch.Tensor:
    """[S,N] rows in sorted order -> [T,N], the k routes of each token summed."""
    return rows.index_select(0, position).view(tokens, -1, rows.shape[1]).sum(dim=1)


class _GatherGroupedGemm(torch.autograd.Function):
    """Y[r] = X[A_idx[r]] @ W[e(r)].T for the routes r of group e (varlen-M, gather in A)."""

    @staticmethod
    def forward(ctx, x, w, w_kn, cu, a_idx, position, gemm):
        ctx.save_for_backward(x, w, cu, a_idx, position)
        ctx.gemm = gemm
        return gemm(x, w_kn, cu_seqlens_m=cu, A_idx=a_idx)

    @staticmethod
    def backward(ctx, dy):
        x, w, cu, a_idx, position = ctx.saved_tensors
        gemm = ctx.gemm
        dy = dy.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dxs = gemm(dy, w, cu_seqlens_m=cu)  # W [E,N,K] read as [L,K',N']
            dx = _route_sum(dxs, position, x.shape[0])
        if ctx.needs_input_grad[1]:
            xs = x.index_select(0, a_idx.long())
            dw = gemm(dy.T, xs, cu_seqlens_k=cu)  # [E,N,K]
        return dx, dw, None, None, None, None, None


class _GroupedGemm(torch.autograd.Function):
    """Y[r] = A[r] @ W[e(r)].T, rows already sorted by expert (varlen-M)."""

    @staticmethod
    def forward(ctx, a, w, w_kn, cu, gemm):
        ctx.save_for_backward(a, w, cu)
        ctx.gemm = gemm
        return gemm(a, w_kn, cu_seqlens_m=cu)

    @staticmethod
    def backward(ctx, dy):
        a, w, cu = ctx.saved_tensors
        gemm = ctx.gemm
        dy = dy.contiguous()
        da = gemm(dy, w, cu_seqlens_m=cu) if ctx.needs_input_grad[0] else None
        dw = gemm(dy.T, a, cu_seqlens_k=cu) if ctx.needs_input_grad[1] else None
        return da, dw, None, None, None


def _prepare_quack(weights, num_experts, limit, tuned, gemm=None):
    if gemm is None:
        gemm = _import("quack.gemm_interface").gemm
    gemm = functools.partial(gemm, tuned=tuned)  # QuACK's default is tuned=True (autotunes)
    w1 = _merged_fc1(weights).contiguous().requires_grad_()   # [E,2I,H]
    w2 = weights["w_down"].detach().contiguous().requires_grad_()  # [E,H,I]
    # the [E,K,N] operands of the forward GEMMs, once per shape (VeOmni transposes per call)
    w1_kn = w1.detach().transpose(1, 2).contiguous()            # [E,H,2I]
    w2_kn = w2.detach().transpose(1, 2).contiguous()            # [E,I,H]
    inter = w1.shape[1] // 2

    def layer(x, sel, rw, swiglu_limit=None, w1=w1, w2=w2):
        tokens = x.shape[0]
        cu, a_idx, order, position = _routes(sel, num_experts)
        h = _GatherGroupedGemm.apply(x, w1, w1_kn, cu, a_idx, position, gemm)   # [S,2I]
        a = _swiglu(h[:, :inter], h[:, inter:], swiglu_limit)
        aw = a * rw.reshape(-1).index_select(0, order).unsqueeze(1).to(a.dtype)
        y = _GroupedGemm.apply(aw, w2, w2_kn, cu, gemm)                         # [S,H]
        return _route_sum(y, position, tokens)

    return layer, {"w1": w1, "w2": w2}, contextlib.nullcontext()


def prepare(impl: str, weights: Dict[str, torch.Tensor], num_experts: int,
            limit: Optional[float]):
    """(layer, params, scope): layer(x, sel, rw, swiglu_limit=..., **params) -> out [T,H]; params
    are the peer's own weight leaves (converted once here, outside any timed region); run the
    check and the timing (forward and backward) inside the context manager scope."""
    if impl == "sonicmoe":
        return _prepare_sonic(weights, num_experts, limit, tuned=False)
    if impl == "sonicmoe-tuned":
        return _prepare_sonic(weights, num_experts, limit, tuned=True)
    if impl == "quack":
        return _prepare_quack(weights, num_experts, limit, tuned=False)
    if impl == "quack-tuned":
        return _prepare_quack(weights, num_experts, limit, tuned=True)
    raise PeerUnavailable(f"unknown peer {impl!r}")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b| in float32 (Frobenius)."""
    a, b = a.float(), b.float()
    den = b.norm().item()
    return (a - b).norm().item() / den if den > 0 else (a - b).norm().item()


def check(layer, params, x, sel, rw, dout, ref_out, ref_dx, limit,
          tol: float = TOLERANCE) -> Dict[str, object]:
    """The peer's forward output and dx against the reference on the same inputs.
    {"out_rel_err", "dx_rel_err", "ok"}; ok is False when either is >= tol or not finite."""
    xg = x.detach().requires_grad_()
    out = layer(xg, sel, rw, swiglu_limit=limit, **params)
    (dx,) = torch.autograd.grad(out, (xg,), dout)
    e_out, e_dx = rel_err(out.detach(), ref_out), rel_err(dx, ref_dx)
    ok = all(e == e and e < tol for e in (e_out, e_dx))  # e == e: NaN fails
    return {"out_rel_err": e_out, "dx_rel_err": e_dx, "ok": ok}


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {text}" if not isinstance(e, PeerUnavailable) else text


def status(impls) -> Dict[str, str]:
    """impl -> "ok: <version>" or "skipped: <reason>" for the peers among impls (each imported
    once per run, before any shape)."""
    result = {}
    for impl in impls:
        if impl in PEER_IMPLS:
            try:
                result[impl] = "ok: " + probe(impl)
            except Exception as e:
                result[impl] = f"skipped: {_reason(e)}"
    return result


def reference(layers, x, sel, rw, weights, dout, limit, log=print):
    """(name, out, dx) of the first of layers [(name, fn)] that runs on these inputs: moejit's
    result, or torch._grouped_mm's when moejit itself fails; (None, None, None) if none runs."""
    xg = x.detach().requires_grad_()
    for name, fn in layers:
        try:
            out = fn(xg, sel, rw, swiglu_limit=limit, **weights)
            (dx,) = torch.autograd.grad(out, (xg,), dout)
            return name, out.detach(), dx
        except Exception as e:
            log(f"reference {name} failed: {_reason(e)}")
    return None, None, None


def run_peer(impl, statuses, ref, x, sel, rw, weights, dout, limit, time_fn) -> Dict[str, object]:
    """Check the peer against ref = (name, out, dx); only when it agrees, time it with
    time_fn(params, layer=layer). {"skipped": reason} when unavailable, {"wrong": ..., "check":
    ...} when it disagrees, otherwise time_fn's result with "check" added."""
    state = statuses.get(impl) or "skipped: not probed"
    if not state.startswith("ok"):
        return {"skipped": state.split(": ", 1)[-1]}
    ref_name, ref_out, ref_dx = ref
    if ref_name is None:
        return {"skipped": "no reference result (moejit and grouped_mm both failed)"}
    try:
        layer, params, scope = prepare(impl, weights, weights["w_down"].shape[0], limit)
    except Exception as e:  # PeerUnavailable (e.g. no SwiGLU limit) or a failing set-up
        return {"skipped": _reason(e)}
    with scope:
        try:
            gate = check(layer, params, x, sel, rw, dout, ref_out, ref_dx, limit)
        except Exception as e:  # a peer that cannot run these inputs: skipped, with the reason
            return {"skipped": _reason(e)}
        gate["reference"] = ref_name
        if not gate["ok"]:
            return {"wrong": f"out {gate['out_rel_err']:.1e}, dx {gate['dx_rel_err']:.1e} vs "
                             f"{ref_name} (tolerance {TOLERANCE:.0e})", "check": gate}
        result = time_fn(params, layer=layer)
    result["check"] = gate
    return result
