"""GPU tests of moejit.torch: forward and every gradient against a float64 eager reference and
against the torch._grouped_mm layer; bf16 and fp16, split and merged, softmax top-k routing,
empty experts and duplicate routes (every route to expert 0), with and without a SwiGLU limit;
T = 0 and T = 1; bitwise determinism; a CUDA-graph captured training step equals eager.

Every output, gradient, saved buffer and workspace is poisoned (NaN / 0xFF) before each
launch (moejit.torch._debug_poison), and every result must come back finite.
"""

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import moejit  # noqa: E402
import moejit.torch as mt  # noqa: E402
from gated_reference import rel  # noqa: E402
from cuda_graph_step import GraphedLayerStep  # noqa: E402
from moejit_bench.peers import (eager_loop_layer, grouped_mm_layer, routing_all_to_expert0,  # noqa: E402
                          routing_topk)

T, H, I, E, K = 300, 512, 256, 16, 4
LIMIT = 0.75  # g ~ N(0, 1) here: clamps about 23 % of g and 45 % of u
# ‖out − ref‖ / ‖ref‖ bounds; bf16 lands near 1e-2 (docs/DESIGN.md), fp16 about 8x lower.
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
GRAD_NAMES = ("x", "routing_weights", "w_gate", "w_up", "w_gate_up", "w_down")


@pytest.fixture(autouse=True)
def poison():
    mt._debug_poison = True
    yield
    mt._debug_poison = False


class Case:
    """Random inputs of one layer call. bf16 cases take fp32 routing weights and fp16 cases
    fp16 ones; split cases take int64 expert ids and merged cases int32."""

    def __init__(self, dtype, merged, routing, limit, tokens=T, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        dev = "cuda"
        self.dtype, self.merged, self.limit = dtype, merged, limit
        rw_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
        if routing == "topk":
            sel, rw = routing_topk(tokens, E, K, rw_dtype, dev, g)
        elif routing == "empty":  # the last quarter of the experts get no rows
            sel, rw = routing_topk(tokens, E, K, rw_dtype, dev, g, empty_experts=E // 4)
        elif routing == "expert0":
            sel, rw = routing_all_to_expert0(tokens, K, rw_dtype, dev, g)
        else:
            raise ValueError(routing)
        self.sel = sel.to(torch.int32 if merged else torch.int64)
        self.rw = rw
        self.x = torch.randn(tokens, H, device=dev, generator=g).to(dtype)
        w_gate = torch.randn(E, I, H, device=dev, generator=g) * H ** -0.5
        w_up = torch.randn(E, I, H, device=dev, generator=g) * H ** -0.5
        w_down = torch.randn(E, H, I, device=dev, generator=g) * I ** -0.5
        if merged:
            self.weights = {"w_gate_up": torch.cat([w_gate, w_up], 1).to(dtype)}
        else:
            self.weights = {"w_gate": w_gate.to(dtype), "w_up": w_up.to(dtype)}
        self.weights["w_down"] = w_down.to(dtype)
        self.dout = torch.randn(tokens, H, device=dev, generator=g).to(dtype)

    def unused_experts(self):
        used = torch.zeros(E, dtype=torch.bool, device=self.sel.device)
        used[self.sel.reshape(-1).long()] = True
        return [e for e in range(E) if not used[e]]


def moejit_layer(x, sel, rw, w_gate=None, w_up=None, w_gate_up=None, w_down=None,
                 swiglu_limit=None):
    if w_gate_up is not None:
        return mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, swiglu_limit)
    return mt.fused_moe(x, sel, rw, w_gate, w_up, w_down, swiglu_limit)


def run(layer, case, as_dtype=None):
    """Forward + backward; (out, {name: grad}). as_dtype=float64 runs on upcast copies."""
    cast = (lambda t: t.to(as_dtype)) if as_dtype is not None else (lambda t: t)
    x = cast(case.x).detach().clone().requires_grad_()
    rw = cast(case.rw).detach().clone().requires_grad_()
    ws = {n: cast(w).detach().clone().requires_grad_() for n, w in case.weights.items()}
    out = layer(x, case.sel, rw, swiglu_limit=case.limit, **ws)
    out.backward(cast(case.dout))
    grads = {"x": x.grad, "routing_weights": rw.grad}
    grads.update({n: w.grad for n, w in ws.items()})
    return out.detach(), grads


def reference_layer(round_to=None):
    """Float64 per-expert reference. With round_to, g and u are rounded to that dtype before
    the SwiGLU limit (straight-through), for an implementation that clamps stored values:
    near the limit a rounding step flips the clamp mask, which alone moves a bf16 gradient
    by ~2 % and would otherwise force a loose tolerance."""
    def layer(x, sel, rw, w_gate=None, w_up=None, w_gate_up=None, w_down=None,
              swiglu_limit=None):
        if w_gate_up is not None:
            w_gate, w_up = w_gate_up[:, :I], w_gate_up[:, I:]
        out = torch.zeros_like(x)
        for e in range(w_down.shape[0]):
            t_idx, j_idx = torch.where(sel == e)
            if t_idx.numel() == 0:
                continue
            xe = x[t_idx]
            g, u = xe @ w_gate[e].t(), xe @ w_up[e].t()
            if round_to is not None:
                g = g + (g.to(round_to).to(g.dtype) - g).detach()
                u = u + (u.to(round_to).to(u.dtype) - u).detach()
            if swiglu_limit is not None:
                g, u = g.clamp(max=swiglu_limit), u.clamp(-swiglu_limit, swiglu_limit)
            aw = F.silu(g) * u * rw[t_idx, j_idx].unsqueeze(1)
            out = out.index_add(0, t_idx, aw @ w_down[e].t())
        return out
    return layer


def errors_vs(result, ref):
    out, grads = result
    ref_out, ref_grads = ref
    errs = {"out": rel(out, ref_out)}
    errs.update({n: rel(grads[n], ref_grads[n]) for n in grads})
    return errs


def assert_finite(result):
    out, grads = result
    assert torch.isfinite(out).all(), "out has non-finite values (rows left unwritten?)"
    for name, g in grads.items():
        assert g is not None, f"no gradient for {name}"
        assert torch.isfinite(g).all(), f"d{name} has non-finite values (rows left unwritten?)"


def assert_close_to_reference(result, case, tol):
    """Within tol of the float64 reference; with a limit, of either clamp convention."""
    refs = [run(reference_layer(), case, torch.float64)]
    if case.limit is not None:
        refs.append(run(reference_layer(case.dtype), case, torch.float64))
    errs = [errors_vs(result, ref) for ref in refs]
    best = min(errs, key=lambda e: max(e.values()))
    assert max(best.values()) < tol, f"relative errors vs float64 reference: {best}"
    return refs[errs.index(best)]


def assert_unused_experts_have_zero_gradients(result, case):
    _, grads = result
    for e in case.unused_experts():
        for name in ("w_gate", "w_up", "w_gate_up", "w_down"):
            if name in grads:
                assert torch.count_nonzero(grads[name][e]) == 0, f"d{name}[{e}] is not 0"


PARAMS = [(dtype, merged, routing, limit)
          for dtype in (torch.bfloat16, torch.float16)
          for merged in (False, True)
          for routing in ("topk", "empty", "expert0")
          for limit in (None, LIMIT)]


def _id(p):
    dtype, merged, routing, limit = p
    return (f"{str(dtype)[6:]}-{'merged' if merged else 'split'}-{routing}"
            f"{'-limit' if limit else ''}")


@pytest.mark.parametrize("params", PARAMS, ids=_id)
def test_matches_float64_reference(params):
    case = Case(*params)
    result = run(moejit_layer, case)
    assert_finite(result)
    assert_close_to_reference(result, case, TOL[case.dtype])
    if params[2] != "topk":
        assert case.unused_experts(), "the routing should leave experts empty"
    assert_unused_experts_have_zero_gradients(result, case)


@pytest.mark.parametrize("params", PARAMS, ids=_id)
def test_matches_grouped_mm_layer(params):
    case = Case(*params)
    try:
        peer = run(grouped_mm_layer, case)
        torch.cuda.synchronize()
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._grouped_mm does not run this case ({case.dtype}): {e}")
    # The peer itself must be right, or the comparison (and the benchmark) means nothing.
    ref = assert_close_to_reference(peer, case, TOL[case.dtype])
    result = run(moejit_layer, case)
    assert_finite(result)
    errs = errors_vs(result, peer)
    # Both sit within TOL of the reference, so within about 2 TOL of each other.
    assert max(errs.values()) < 2 * TOL[case.dtype], f"relative errors vs grouped_mm: {errs}"
    assert max(errors_vs(result, ref).values()) < TOL[case.dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_eager_loop_peer_is_right(dtype):
    case = Case(dtype, False, "topk", LIMIT, tokens=64)
    assert_close_to_reference(run(eager_loop_layer, case), case, TOL[dtype])


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_one_token(merged):
    case = Case(torch.bfloat16, merged, "topk", None, tokens=1)
    result = run(moejit_layer, case)
    assert_finite(result)
    assert_close_to_reference(result, case, TOL[case.dtype])
    assert len(case.unused_experts()) == E - K
    assert_unused_experts_have_zero_gradients(result, case)


def test_one_token_duplicate_routes():
    case = Case(torch.bfloat16, False, "expert0", LIMIT, tokens=1)
    result = run(moejit_layer, case)
    assert_finite(result)
    assert_close_to_reference(result, case, TOL[case.dtype])
    assert_unused_experts_have_zero_gradients(result, case)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_zero_tokens(merged):
    case = Case(torch.bfloat16, merged, "topk", None, tokens=0)
    out, grads = run(moejit_layer, case)
    assert out.shape == (0, H)
    assert grads["x"].shape == (0, H) and grads["routing_weights"].shape == (0, K)
    for name, w in case.weights.items():
        assert grads[name].shape == w.shape
        assert torch.count_nonzero(grads[name]) == 0, f"d{name} must be exactly 0 for T = 0"


def test_leading_dimensions():
    case = Case(torch.bfloat16, False, "topk", None, tokens=4 * 75)
    out, grads = run(moejit_layer, case)
    x = case.x.view(4, 75, H).detach().clone().requires_grad_()
    out3 = moejit_layer(x, case.sel.view(4, 75, K), case.rw.view(4, 75, K),
                        **case.weights)
    assert out3.shape == (4, 75, H)
    out3.backward(case.dout.view(4, 75, H))
    assert torch.equal(out3.detach().view(T, H), out)
    assert torch.equal(x.grad.view(T, H), grads["x"])


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_bitwise_deterministic(merged):
    case = Case(torch.bfloat16, merged, "topk", LIMIT)
    first = run(moejit_layer, case)
    second = run(moejit_layer, case)
    assert torch.equal(first[0], second[0])
    for name in first[1]:
        assert torch.equal(first[1][name], second[1][name]), f"d{name} differs between runs"


def test_split_and_merged_agree():
    # docs/DESIGN.md: split and merged fc1 give the same forward and weight gradients; dx may
    # differ by rounding.
    split = Case(torch.bfloat16, False, "topk", LIMIT)
    merged = Case(torch.bfloat16, True, "topk", LIMIT)
    merged.sel = split.sel.to(torch.int32)
    merged.rw, merged.x, merged.dout = split.rw, split.x, split.dout
    merged.weights = {"w_gate_up": torch.cat([split.weights["w_gate"], split.weights["w_up"]], 1),
                      "w_down": split.weights["w_down"]}
    a_out, a = run(moejit_layer, split)
    b_out, b = run(moejit_layer, merged)
    assert torch.equal(a_out, b_out)
    assert torch.equal(a["w_down"], b["w_down"])
    assert torch.equal(a["routing_weights"], b["routing_weights"])
    assert torch.equal(a["w_gate"], b["w_gate_up"][:, :I])
    assert torch.equal(a["w_up"], b["w_gate_up"][:, I:])
    assert rel(b["x"], a["x"]) < TOL[torch.bfloat16]


def test_module_matches_functional():
    torch.manual_seed(1)
    for merged in (False, True):
        layer = mt.MoEExperts(E, H, I, merged=merged, swiglu_limit=LIMIT, device="cuda",
                              dtype=torch.bfloat16)
        assert ("w_gate_up" in dict(layer.named_parameters())) == merged
        case = Case(torch.bfloat16, merged, "topk", LIMIT)
        out = layer(case.x, case.sel, case.rw)
        params = dict(layer.named_parameters())
        expected = moejit_layer(case.x, case.sel, case.rw, swiglu_limit=LIMIT,
                                **{n: p.detach() for n, p in params.items()})
        assert torch.equal(out.detach(), expected)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_cuda_graph_training_step_matches_eager(merged):
    torch.manual_seed(2)
    layer = mt.MoEExperts(E, H, I, merged=merged, swiglu_limit=LIMIT, device="cuda",
                          dtype=torch.bfloat16)
    first = Case(torch.bfloat16, merged, "topk", LIMIT, seed=10)
    graphed = GraphedLayerStep(layer, first.x, first.sel, first.rw, first.dout)
    for seed in (11, 12):  # fresh data each replay: the graph must recompute, not replay stale
        case = Case(torch.bfloat16, merged, "topk", LIMIT, seed=seed)
        graphed.replay_matches_eager(case.x, case.sel, case.rw, case.dout)


def test_no_host_synchronisation():
    case = Case(torch.bfloat16, False, "topk", None)
    run(moejit_layer, case)  # warm: plan created
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run(moejit_layer, case)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _bad_calls(case):
    x, sel, rw, w = case.x, case.sel, case.rw, case.weights
    wg, wu, wd = w["w_gate"], w["w_up"], w["w_down"]
    unaligned = torch.empty(T * H + 1, dtype=x.dtype, device=x.device)[1:].view(T, H)
    return {
        "weight dtype": (lambda: mt.fused_moe(x, sel, rw, wg.half(), wu, wd), "w_gate must"),
        "non-contiguous weight": (lambda: mt.fused_moe(x, sel, rw, wg, wu,
                                                       wd.transpose(1, 2).contiguous()
                                                       .transpose(1, 2)), "w_down must be"),
        "transposed w_down": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd.transpose(1, 2)),
                              "w_down"),
        "cpu x": (lambda: mt.fused_moe(x.cpu(), sel, rw, wg, wu, wd), "CUDA"),
        "float index": (lambda: mt.fused_moe(x, sel.float(), rw, wg, wu, wd), "int32 or int64"),
        "unaligned x": (lambda: mt.fused_moe(unaligned, sel, rw, wg, wu, wd), "aligned"),
        "bad limit": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd, swiglu_limit=-1.0),
                      "swiglu_limit"),
        "not a tensor": (lambda: mt.fused_moe(x, sel, rw.tolist(), wg, wu, wd), "torch.Tensor"),
    }


@pytest.mark.parametrize("name", ["weight dtype", "non-contiguous weight", "transposed w_down",
                                  "cpu x", "float index", "unaligned x", "bad limit",
                                  "not a tensor"])
def test_bad_arguments_are_rejected_before_any_launch(name):
    mt.clear_caches()
    case = Case(torch.bfloat16, False, "topk", None)
    call, message = _bad_calls(case)[name]
    with pytest.raises(moejit.InvalidArgumentError, match=message):
        call()
    assert not mt._plans, "a plan was created before the arguments were checked"
