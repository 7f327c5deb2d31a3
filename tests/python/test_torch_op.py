"""CPU-side tests of the torch.library custom ops (no GPU needed): registration and schemas,
the fake (meta) implementations' shapes and dtypes under FakeTensorMode for split and merged
fc1, any leading shape, both routing dtypes and a symbolic (dynamic) T, the saved-size bound,
and clear moejit.InvalidArgumentError messages for bad inputs, raised before the library is
touched (fake tensors on "cuda" need no device)."""

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

import moejit  # noqa: E402
import moejit.torch as mt  # noqa: E402
from moejit import _op  # noqa: E402

H, I, E, K = 512, 256, 16, 4
BF16 = torch.bfloat16

SCHEMAS = {
    "fused_moe": "moejit::fused_moe(Tensor x, Tensor selected_experts, Tensor routing_weights, "
                 "Tensor w_gate, Tensor w_up, Tensor w_down, float swiglu_limit, "
                 "str recipe=\"bf16\") -> (Tensor, Tensor)",
    "fused_moe_merged": "moejit::fused_moe_merged(Tensor x, Tensor selected_experts, "
                        "Tensor routing_weights, Tensor w_gate_up, Tensor w_down, "
                        "float swiglu_limit, str recipe=\"bf16\") -> (Tensor, Tensor)",
    "fused_moe_backward": "moejit::fused_moe_backward(Tensor dout, Tensor x, "
                          "Tensor selected_experts, Tensor routing_weights, Tensor w_gate, "
                          "Tensor w_up, Tensor w_down, Tensor(a7!) saved, float swiglu_limit, "
                          "str recipe=\"bf16\") -> (Tensor, Tensor, Tensor, Tensor)",
    "fused_moe_merged_backward": "moejit::fused_moe_merged_backward(Tensor dout, Tensor x, "
                                 "Tensor selected_experts, Tensor routing_weights, "
                                 "Tensor w_gate_up, Tensor w_down, Tensor(a6!) saved, "
                                 "float swiglu_limit, str recipe=\"bf16\") -> "
                                 "(Tensor, Tensor, Tensor, Tensor)",
    "fused_moe_backward_main_grad": "moejit::fused_moe_backward_main_grad(Tensor dout, "
                                    "Tensor x, Tensor selected_experts, "
                                    "Tensor routing_weights, Tensor w_gate, Tensor w_up, "
                                    "Tensor w_down, Tensor(a7!) saved, float swiglu_limit, "
                                    "Tensor(a9!) main_grad_gate, Tensor(a10!) main_grad_up, "
                                    "Tensor(a11!) main_grad_down) -> (Tensor, Tensor)",
    "fused_moe_merged_backward_main_grad": "moejit::fused_moe_merged_backward_main_grad("
                                           "Tensor dout, Tensor x, Tensor selected_experts, "
                                           "Tensor routing_weights, Tensor w_gate_up, "
                                           "Tensor w_down, Tensor(a6!) saved, float swiglu_limit, "
                                           "Tensor(a8!) main_grad_gate_up, "
                                           "Tensor(a9!) main_grad_down) -> (Tensor, Tensor)",
    "fused_moe_gated": "moejit::fused_moe_gated(Tensor x, Tensor selected_experts, "
                       "Tensor routing_weights, Tensor w_gate_up, Tensor w_down, "
                       "Tensor? b_gate_up, Tensor? b_down, float swiglu_limit, str activation, "
                       "float alpha, bool interleaved, bool weights_transposed) -> "
                       "(Tensor, Tensor)",
    "fused_moe_gated_backward": "moejit::fused_moe_gated_backward(Tensor dout, Tensor x, "
                                "Tensor selected_experts, Tensor routing_weights, "
                                "Tensor w_gate_up, Tensor w_down, Tensor? b_gate_up, "
                                "Tensor? b_down, Tensor(a8!) saved, float swiglu_limit, "
                                "str activation, float alpha, bool interleaved, "
                                "bool weights_transposed) -> "
                                "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    "fused_moe_gated_backward_main_grad": "moejit::fused_moe_gated_backward_main_grad("
                                          "Tensor dout, Tensor x, Tensor selected_experts, "
                                          "Tensor routing_weights, Tensor w_gate_up, "
                                          "Tensor w_down, Tensor? b_gate_up, Tensor? b_down, "
                                          "Tensor(a8!) saved, float swiglu_limit, str activation, "
                                          "float alpha, bool interleaved, "
                                          "bool weights_transposed, "
                                          "Tensor(a14!) main_grad_gate_up, "
                                          "Tensor(a15!) main_grad_down, "
                                          "Tensor(a16!)? main_grad_b_gate_up, "
                                          "Tensor(a17!)? main_grad_b_down) -> (Tensor, Tensor)",
}


def test_every_op_is_registered_with_its_schema():
    assert set(SCHEMAS) == set(_op.OPS)
    for name, schema in SCHEMAS.items():
        assert str(getattr(torch.ops.moejit, name).default._schema) == schema


def test_only_the_forward_ops_are_differentiable_and_the_backward_ops_mutate():
    # The backward ops consume `saved` (0.12); the _main_grad ones also add into main_grad.
    for name in _op.OPS:
        schema = getattr(torch.ops.moejit, name).default._schema
        mutated = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
        if name.endswith("_main_grad"):
            assert mutated[0] == "saved", name
            assert len(mutated) > 1 and all(m.startswith("main_grad") for m in mutated[1:]), name
        elif "backward" in name:
            assert mutated == ["saved"], name
        else:
            assert not mutated, name


def _layer(fake, lead=(300,), merged=False, rw_dtype=torch.float32, index=torch.int64,
           dtype=BF16):
    """Fake tensors (on "cuda") of one layer call."""
    with fake:
        x = torch.empty(*lead, H, dtype=dtype, device="cuda")
        sel = torch.empty(*lead, K, dtype=index, device="cuda")
        rw = torch.empty(*lead, K, dtype=rw_dtype, device="cuda")
        if merged:
            weights = (torch.empty(E, 2 * I, H, dtype=dtype, device="cuda"),)
        else:
            weights = (torch.empty(E, I, H, dtype=dtype, device="cuda"),
                       torch.empty(E, I, H, dtype=dtype, device="cuda"))
        weights += (torch.empty(E, H, I, dtype=dtype, device="cuda"),)
    return x, sel, rw, weights


def _tokens(lead):
    t = 1
    for d in lead:
        t *= d
    return t


CASES = [(lead, merged, rw_dtype, index, dtype)
         for lead in ((300,), (4, 75), (2, 3, 5), (0,))
         for merged in (False, True)
         for rw_dtype, index, dtype in ((torch.float32, torch.int64, BF16),
                                        (BF16, torch.int32, BF16),
                                        (torch.float16, torch.int64, torch.float16),
                                        (torch.float32, torch.int32, torch.float16))]


def _case_id(case):
    lead, merged, rw_dtype, index, dtype = case
    return (f"{'x'.join(map(str, lead))}-{'merged' if merged else 'split'}-"
            f"{str(dtype)[6:]}-rw{str(rw_dtype)[6:]}-{str(index)[6:]}")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fake_forward_and_backward_shapes(case):
    lead, merged, rw_dtype, index, dtype = case
    fake = FakeTensorMode()
    x, sel, rw, weights = _layer(fake, lead, merged, rw_dtype, index, dtype)
    fwd = torch.ops.moejit.fused_moe_merged if merged else torch.ops.moejit.fused_moe
    with fake:
        out, saved = fwd(x, sel, rw, *weights, 0.5)
        assert out.shape == x.shape and out.dtype == dtype and out.device == x.device
        assert out.is_contiguous()
        assert saved.dtype == torch.uint8 and saved.dim() == 1
        assert saved.shape[0] == mt.saved_bytes_bound(_tokens(lead), H, I, E, K)
        assert saved.device == x.device
        # The public function: same shapes through the wrapper.
        public = mt.fused_moe_merged if merged else mt.fused_moe
        assert public(x, sel, rw, *weights).shape == x.shape
        bwd = (torch.ops.moejit.fused_moe_merged_backward if merged else
               torch.ops.moejit.fused_moe_backward)
        grads = bwd(torch.empty_like(out), x, sel, rw, *weights, saved, 0.0)
        # The split op returns dw_gate and dw_up as one [2,E,I,H] tensor (0.14).
        likes = (x, rw) + weights if merged else (x, rw, torch.stack(weights[:2]), weights[2])
        assert len(grads) == len(likes)
        for g, like in zip(grads, likes):
            assert g.shape == like.shape and g.dtype == like.dtype and g.device == like.device
        main = (torch.ops.moejit.fused_moe_merged_backward_main_grad if merged else
                torch.ops.moejit.fused_moe_backward_main_grad)
        main_grads = [torch.empty(w.shape, dtype=torch.float32, device="cuda") for w in weights]
        dx, drw = main(torch.empty_like(out), x, sel, rw, *weights, saved, 0.0, *main_grads)
        assert dx.shape == x.shape and dx.dtype == x.dtype
        assert drw.shape == rw.shape and drw.dtype == rw_dtype


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="the autograd engine needs a CUDA device for (fake) CUDA tensors")
def test_fake_autograd_gives_every_gradient():
    # The registered autograd formula, traced with fake tensors: the gradients' metadata.
    fake = FakeTensorMode()
    x, sel, rw, weights = _layer(fake, (4, 75))
    with fake:
        leaves = [t.requires_grad_() for t in (x, rw) + weights]
        out = mt.fused_moe(x, sel, rw, *weights, swiglu_limit=1.0)
        grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    for g, like in zip(grads, leaves):
        assert g.shape == like.shape and g.dtype == like.dtype


def test_saved_size_is_affine_in_a_symbolic_token_count():
    shape_env = ShapeEnv()
    fake = FakeTensorMode(shape_env=shape_env)
    from torch._dynamo.source import ConstantSource
    t = shape_env.create_symintnode(shape_env.create_symbol(300, ConstantSource("T")), hint=300)
    with fake:
        x = torch.empty(t, H, dtype=BF16, device="cuda")
        sel = torch.empty(t, K, dtype=torch.int64, device="cuda")
        rw = torch.empty(t, K, dtype=torch.float32, device="cuda")
        wg = torch.empty(E, I, H, dtype=BF16, device="cuda")
        wd = torch.empty(E, H, I, dtype=BF16, device="cuda")
        out, saved = torch.ops.moejit.fused_moe(x, sel, rw, wg, wg, wd, 0.0)
    size = saved.shape[0]
    assert isinstance(size, torch.SymInt), "the saved size should stay symbolic in T"
    assert out.shape[0] is t or str(out.shape[0]) == str(t)
    symbols = {str(s) for s in size.node.expr.free_symbols}
    assert symbols == {str(t.node.expr)}
    for tokens in (0, 1, 300, 4097):
        assert size.node.expr.subs(t.node.expr, tokens) == \
            mt.saved_bytes_bound(tokens, H, I, E, K)
    # No guard pins T to its example value.
    guards = [str(g.expr) for g in shape_env.guards]
    assert not any(str(t.node.expr) in g and "300" in g for g in guards), guards


def test_saved_bytes_bound_covers_the_saved_layout():
    """The bound against the layout moejit's plan_layout.cpp describes, replayed here (offsets,
    scatter_index, g|u; since 0.13 row_token is the forward's workspace, not saved, for
    gathered plans too, and since 0.14 w_s is not saved either): every region starts on a
    256-byte boundary."""
    def layout_end(tokens, el=2):
        rows = tokens * K
        end = 0
        for size in [(E + 1) * 4, rows * 4, rows * 2 * I * el]:
            end = (end + 255) // 256 * 256 + size
        return end
    for tokens in (0, 1, 2, 3, 17, 255, 256, 300, 1000, 4096, 65537):
        bound = mt.saved_bytes_bound(tokens, H, I, E, K)
        assert bound >= layout_end(tokens)
        assert bound - layout_end(tokens) <= 3 * 256  # tight: the padding of three regions


def _bad_calls(fake):
    x, sel, rw, (wg, wu, wd) = _layer(fake)
    with fake:
        return {
            "weight dtype": (lambda: mt.fused_moe(x, sel, rw, wg.half(), wu, wd),
                             "w_gate must have x's dtype"),
            "x dtype": (lambda: mt.fused_moe(x.float(), sel, rw, wg, wu, wd),
                        "x must be bfloat16 or float16"),
            "routing dtype": (lambda: mt.fused_moe(x, sel, rw.double(), wg, wu, wd),
                              "routing_weights must be"),
            "float index": (lambda: mt.fused_moe(x, sel.float(), rw, wg, wu, wd),
                            "int32 or int64"),
            "non-contiguous weight": (lambda: mt.fused_moe(
                x, sel, rw, wg, wu, wd.transpose(1, 2).contiguous().transpose(1, 2)),
                "w_down must be contiguous"),
            "non-contiguous x": (lambda: mt.fused_moe(x.t().contiguous().t(), sel, rw, wg, wu,
                                                      wd),
                                 "x must be contiguous"),
            "transposed w_down": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd.transpose(1, 2)),
                                  r"w_down must be \[E, H, I\]"),
            "hidden mismatch": (lambda: mt.fused_moe(x[:, :256].contiguous(), sel, rw, wg, wu,
                                                     wd),
                                "hidden size"),
            "1-D x": (lambda: mt.fused_moe(x[0], sel[0], rw[0], wg, wu, wd), r"\[T, H\]"),
            "top-k mismatch": (lambda: mt.fused_moe(x, sel, rw[:, :2].contiguous(), wg, wu, wd),
                               "routing_weights must have selected_experts' shape"),
            "lead mismatch": (lambda: mt.fused_moe(x, sel[:10], rw[:10], wg, wu, wd),
                              "selected_experts must be"),
            "odd merged": (lambda: mt.fused_moe_merged(x, sel, rw, wg[:, :255].contiguous(),
                                                       wd), "even middle dim"),
            "bad limit": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd, swiglu_limit=-1.0),
                          "swiglu_limit"),
            "tiny limit": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd, swiglu_limit=1e-50),
                           "swiglu_limit"),
            "string limit": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd, swiglu_limit="1"),
                             "swiglu_limit"),
            "not a tensor": (lambda: mt.fused_moe(x, sel, [1.0], wg,
                                                  wu, wd), "torch.Tensor"),
            "main_grads count": (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd,
                                                      main_grads=(wg,)), "main_grads"),
        }


BAD = ["weight dtype", "x dtype", "routing dtype", "float index", "non-contiguous weight",
       "non-contiguous x", "transposed w_down", "hidden mismatch", "1-D x", "top-k mismatch",
       "lead mismatch", "odd merged", "bad limit", "tiny limit", "string limit", "not a tensor",
       "main_grads count"]


@pytest.mark.parametrize("name", BAD)
def test_bad_inputs_give_clear_errors(name):
    call, message = _bad_calls(FakeTensorMode())[name]
    with pytest.raises(moejit.InvalidArgumentError, match=message):
        call()


def test_bad_saved_buffer_is_rejected():
    fake = FakeTensorMode()
    x, sel, rw, weights = _layer(fake)
    with fake:
        out, saved = torch.ops.moejit.fused_moe(x, sel, rw, *weights, 0.0)
        with pytest.raises(moejit.InvalidArgumentError, match="saved"):
            torch.ops.moejit.fused_moe_backward(out, x, sel, rw, *weights, saved[:-1], 0.0)
        with pytest.raises(moejit.InvalidArgumentError, match="output gradient"):
            torch.ops.moejit.fused_moe_backward(out[:-1], x, sel, rw, *weights, saved, 0.0)


def test_cpu_tensors_give_a_clear_error_not_a_crash():
    x = torch.randn(8, H).to(BF16)
    sel = torch.zeros(8, K, dtype=torch.int64)
    rw = torch.full((8, K), 1.0 / K)
    wg = torch.zeros(E, I, H, dtype=BF16)
    wd = torch.zeros(E, H, I, dtype=BF16)
    _op.clear_caches()
    with pytest.raises(moejit.InvalidArgumentError, match="x must be a CUDA tensor"):
        mt.fused_moe(x, sel, rw, wg, wg, wd)
    with pytest.raises(moejit.InvalidArgumentError, match="x must be a CUDA tensor"):
        torch.ops.moejit.fused_moe_merged(x, sel, rw, torch.cat([wg, wg], 1), wd, 0.0)
    with pytest.raises(moejit.InvalidArgumentError, match="CUDA"):
        mt.MoEExperts(E, H, I)(x, sel, rw)
    assert not mt._plans


def test_module_flags_and_repr():
    layer = mt.MoEExperts(E, 64, 32, merged=True, accumulate_into_main_grad=True)
    assert "accumulate_into_main_grad" in repr(layer)
    assert [n for n, _ in layer.named_parameters()] == ["w_gate_up", "w_down"]


# ---- the gated op (since 0.5)

GATED = [(bias, transposed, lead) for bias in (False, True) for transposed in (False, True)
         for lead in ((300,), (0,), (2, 7))]


@pytest.mark.parametrize("bias,transposed,lead", GATED,
                         ids=lambda v: str(v).replace(" ", "").replace(",", "x"))
def test_fake_gated_forward_and_backward_shapes(bias, transposed, lead):
    fake = FakeTensorMode()
    x, sel, rw, _ = _layer(fake, lead)
    with fake:
        wgu = torch.empty(*((E, H, 2 * I) if transposed else (E, 2 * I, H)), dtype=BF16,
                          device="cuda")
        wd = torch.empty(*((E, I, H) if transposed else (E, H, I)), dtype=BF16, device="cuda")
        bgu = torch.empty(E, 2 * I, dtype=BF16, device="cuda") if bias else None
        bd = torch.empty(E, H, dtype=BF16, device="cuda") if bias else None
        options = (7.0, "gpt_oss", 1.702, True, transposed)
        out, saved = torch.ops.moejit.fused_moe_gated(x, sel, rw, wgu, wd, bgu, bd, *options)
        assert out.shape == x.shape and out.dtype == BF16
        assert saved.shape[0] == mt.saved_bytes_bound(_tokens(lead), H, I, E, K)
        public = mt.fused_moe_merged(x, sel, rw, wgu, wd, 7.0, activation="gpt_oss",
                                     interleaved=True, weights_transposed=transposed,
                                     b_gate_up=bgu, b_down=bd)
        assert public.shape == x.shape
        grads = torch.ops.moejit.fused_moe_gated_backward(torch.empty_like(out), x, sel, rw,
                                                          wgu, wd, bgu, bd, saved, *options)
        likes = (x, rw, wgu, wd) + ((bgu, bd) if bias else (None, None))
        for g, like in zip(grads, likes):
            if like is None:
                assert g.shape == (0,)
            else:
                assert g.shape == like.shape and g.dtype == like.dtype
        mains = [torch.empty(t.shape, dtype=torch.float32, device="cuda") if t is not None
                 else None for t in (wgu, wd, bgu, bd)]
        dx, drw = torch.ops.moejit.fused_moe_gated_backward_main_grad(
            torch.empty_like(out), x, sel, rw, wgu, wd, bgu, bd, saved, *options, *mains)
        assert dx.shape == x.shape and drw.shape == rw.shape


def test_gated_main_grad_for_a_bias_the_layer_lacks_is_an_error():
    fake = FakeTensorMode()
    x, sel, rw, _ = _layer(fake)
    with fake:
        wgu = torch.empty(E, 2 * I, H, dtype=BF16, device="cuda")
        wd = torch.empty(E, H, I, dtype=BF16, device="cuda")
        options = (0.0, "swiglu", 0.0, True, False)
        out, saved = torch.ops.moejit.fused_moe_gated(x, sel, rw, wgu, wd, None, None, *options)
        mains = [torch.empty(t.shape, dtype=torch.float32, device="cuda") for t in (wgu, wd)]
        with pytest.raises(moejit.InvalidArgumentError,
                           match="a main_grad for b_down is given but the layer has no b_down"):
            torch.ops.moejit.fused_moe_gated_backward_main_grad(
                out, x, sel, rw, wgu, wd, None, None, saved, *options, *mains, None,
                torch.empty(E, H, device="cuda"))


def test_plan_key_holds_every_descriptor_field():
    """Layers that differ in any 0.5 option get different plans (moejit._op._plan's key)."""
    from moejit._validate import TensorInfo, check_layer

    def spec(**kw):
        def t(shape, dtype="bfloat16"):
            return TensorInfo(shape, dtype, "cuda:0", True)
        transposed = kw.get("weights_transposed", False)
        args = dict(activation="swiglu", alpha=None, interleaved=False,
                    weights_transposed=False, b_gate_up=None, b_down=None)
        args.update(kw)
        return check_layer("t", t((64, H)), t((64, K), "int64"), t((64, K), "float32"), None,
                           None, t((E, H, 2 * I) if transposed else (E, 2 * I, H)),
                           t((E, I, H) if transposed else (E, H, I)), None, **args)
    bias = dict(b_gate_up=TensorInfo((E, 2 * I), "bfloat16", "cuda:0", True),
                b_down=TensorInfo((E, H), "bfloat16", "cuda:0", True))
    variants = [spec(), spec(interleaved=True), spec(weights_transposed=True), spec(**bias),
                spec(activation="gpt_oss"), spec(activation="gpt_oss", alpha=1.5)]
    device = torch.device("cuda", 0)
    keys = [_op._plan_key(s, device) for s in variants]
    assert len(set(keys)) == len(keys), keys
    # T only picks the bucket; main_grad is part of the key.
    assert _op._plan_key(variants[0], device) != _op._plan_key(variants[0], device, True)
