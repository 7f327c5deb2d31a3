"""Bad arguments are rejected with a clear message before anything is launched: the
framework-neutral tensor checks, the plan descriptor, and the library's own checks."""

import ctypes

import pytest

import moejit
from moejit import _capi
from moejit._validate import TensorInfo, check_layer
from moejit.core import check_swiglu_limit, plan_desc

T, H, I, E, K = 6, 64, 32, 4, 2
DEV = "cuda:0"


def t(shape, dtype="bfloat16", device=DEV, contiguous=True):
    return TensorInfo(tuple(shape), dtype, device, contiguous)


def good(**override):
    args = dict(x=t((T, H)), selected_experts=t((T, K), "int64"),
                routing_weights=t((T, K), "float32"), w_gate=t((E, I, H)), w_up=t((E, I, H)),
                w_gate_up=None, w_down=t((E, H, I)), swiglu_limit=None)
    args.update(override)
    return args


def check(**override):
    return check_layer("fused_moe", **good(**override))


def test_good_split_call():
    spec = check()
    assert (spec.num_tokens, spec.hidden_size, spec.intermediate_size, spec.num_experts,
            spec.top_k) == (T, H, I, E, K)
    assert not spec.merged and spec.swiglu_limit == 0.0
    assert (spec.dtype, spec.index_dtype, spec.routing_dtype) == ("bfloat16", "int64", "float32")


def test_good_merged_call_with_leading_dims_and_limit():
    spec = check(x=t((2, 3, H), "float16"), selected_experts=t((2, 3, K), "int32"),
                 routing_weights=t((2, 3, K), "float16"), w_gate=None, w_up=None,
                 w_gate_up=t((E, 2 * I, H), "float16"), w_down=t((E, H, I), "float16"),
                 swiglu_limit=7)
    assert spec.merged and spec.num_tokens == 6 and spec.intermediate_size == I
    assert spec.swiglu_limit == 7.0 and spec.index_dtype == "int32"


def test_zero_tokens_is_valid():
    spec = check(x=t((0, H)), selected_experts=t((0, K), "int64"),
                 routing_weights=t((0, K), "float32"))
    assert spec.num_tokens == 0


BAD = {
    "x on the cpu": (dict(x=t((T, H), device="cpu")), "x must be a CUDA tensor"),
    "weight on another device": (dict(w_up=t((E, I, H), device="cuda:1")), "w_up is on cuda:1"),
    "x float32": (dict(x=t((T, H), "float32")), "x must be bfloat16 or float16"),
    "float index": (dict(selected_experts=t((T, K), "float32")),
                    "selected_experts must be int32 or int64"),
    "routing fp16 with bf16 x": (dict(routing_weights=t((T, K), "float16")),
                                 "routing_weights must be bfloat16"),
    "weight dtype": (dict(w_down=t((E, H, I), "float16")), "w_down must have x's dtype"),
    "x 1-D": (dict(x=t((H,))), "x must be"),
    "selected rows": (dict(selected_experts=t((T + 1, K), "int64")), "selected_experts must be"),
    "routing shape": (dict(routing_weights=t((T, K + 1), "float32")),
                      "routing_weights must have selected_experts' shape"),
    "top_k 0": (dict(selected_experts=t((T, 0), "int64"), routing_weights=t((T, 0), "float32")),
                "top_k"),
    "w_gate 2-D": (dict(w_gate=t((I, H))), "w_gate must be 3-D"),
    "w_gate hidden": (dict(w_gate=t((E, I, H + 8)), w_up=t((E, I, H + 8))), "w_gate must be"),
    "w_up shape": (dict(w_up=t((E, I + 1, H))), "w_up must have w_gate's shape"),
    "w_down transposed": (dict(w_down=t((E, I, H))), "w_down must be [E, H, I]"),
    "w_down experts": (dict(w_down=t((E + 1, H, I))), "w_down must be [E, H, I]"),
    "missing w_up": (dict(w_up=None), "w_gate and w_up are both required"),
    "both layouts": (dict(w_gate_up=t((E, 2 * I, H))), "not both"),
    "merged odd": (dict(w_gate=None, w_up=None, w_gate_up=t((E, 2 * I + 1, H))), "even"),
    "non-contiguous x": (dict(x=t((T, H), contiguous=False)), "x must be contiguous"),
    "non-contiguous weight": (dict(w_gate=t((E, I, H), contiguous=False)),
                              "w_gate must be contiguous"),
    "negative limit": (dict(swiglu_limit=-1.0), "swiglu_limit"),
    "zero limit": (dict(swiglu_limit=0.0), "swiglu_limit"),
    "nan limit": (dict(swiglu_limit=float("nan")), "swiglu_limit"),
    "string limit": (dict(swiglu_limit="big"), "swiglu_limit"),
}


def invalid(call, override, message, prefix):
    """call(**override) raises InvalidArgumentError: its message starts with prefix and holds
    message."""
    with pytest.raises(moejit.InvalidArgumentError) as info:
        call(**override)
    assert message in info.value.message
    assert info.value.message.startswith(prefix)
    return info.value


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_layer_arguments(case):
    error = invalid(check, *BAD[case], "fused_moe: ")
    assert error.status == _capi.ERROR_INVALID_ARGUMENT


def test_swiglu_limit_values():
    assert check_swiglu_limit(None) == 0.0
    assert check_swiglu_limit(7) == 7.0
    for bad in (0, -3, float("inf"), float("nan"), 1e-50, 1e39):
        with pytest.raises(moejit.InvalidArgumentError):
            check_swiglu_limit(bad)


def test_plan_desc_fields(lib):
    d = plan_desc(dtype="bf16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=K,
                  merged=True, swiglu_limit=7.0, index_dtype="int32", routing_dtype="float32")
    assert d.struct_size == ctypes.sizeof(_capi.PlanDesc)
    assert (d.dtype, d.hidden_size, d.intermediate_size, d.num_experts, d.top_k) == (
        _capi.DTYPE_BF16, H, I, E, K)
    assert d.fc1_layout == _capi.FC1_MERGED and d.activation == _capi.ACTIVATION_SWIGLU
    assert d.swiglu_limit == 7.0
    assert d.weight_grad_dtype == _capi.DTYPE_BF16 and d.weight_grad_accumulate == 0
    assert d.index_dtype == _capi.DTYPE_INT32 and d.routing_dtype == _capi.DTYPE_FP32


@pytest.mark.parametrize("override,message", [
    (dict(dtype="float64"), "dtype"),
    (dict(hidden_size=64.0), "hidden_size"),
    (dict(top_k="2"), "top_k"),
    (dict(swiglu_limit=-2), "swiglu_limit"),
])
def test_plan_desc_python_checks(lib, override, message):
    args = dict(dtype="bfloat16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=K)
    args.update(override)
    with pytest.raises(moejit.InvalidArgumentError, match=message):
        plan_desc(**args)


@pytest.mark.parametrize("field,value,name", [
    ("hidden_size", 0, "hidden_size"),
    ("intermediate_size", -4, "intermediate_size"),
    ("num_experts", 0, "num_experts"),
    ("top_k", 0, "top_k"),
])
def test_library_rejects_a_bad_plan(compile_only_context, field, value, name):
    args = dict(dtype="bfloat16", hidden_size=512, intermediate_size=256, num_experts=8, top_k=2)
    args[field] = value
    with pytest.raises(moejit.InvalidArgumentError) as info:
        moejit.warmup(compile_only_context, **args)
    assert name in info.value.message


def test_library_rejects_a_bad_enum(compile_only_context, lib):
    d = plan_desc(dtype="bfloat16", hidden_size=512, intermediate_size=256, num_experts=8,
                  top_k=2)
    d.fc1_layout = 7
    with pytest.raises((moejit.InvalidArgumentError, moejit.UnsupportedError)):
        _capi.check(lib.moejit_plan_warmup(compile_only_context.handle, ctypes.byref(d), None))
    d = plan_desc(dtype="bfloat16", hidden_size=512, intermediate_size=256, num_experts=8,
                  top_k=2)
    d.dtype = _capi.DTYPE_INT32
    with pytest.raises((moejit.InvalidArgumentError, moejit.UnsupportedError)):
        _capi.check(lib.moejit_plan_warmup(compile_only_context.handle, ctypes.byref(d), None))


def test_library_rejects_null_handles(lib):
    args = _capi.init_struct(_capi.ForwardArgs)
    with pytest.raises(moejit.InvalidArgumentError, match="plan"):
        _capi.check(lib.moejit_plan_forward(None, ctypes.byref(args)))
    d = plan_desc(dtype="bfloat16", hidden_size=512, intermediate_size=256, num_experts=8,
                  top_k=2)
    with pytest.raises(moejit.InvalidArgumentError, match="context"):
        _capi.check(lib.moejit_plan_warmup(None, ctypes.byref(d), None))
    with pytest.raises(moejit.InvalidArgumentError):
        _capi.check(lib.moejit_plan_saved_size(None, 4, ctypes.byref(ctypes.c_size_t())))


def test_library_rejects_a_stale_descriptor_size(compile_only_context, lib):
    d = plan_desc(dtype="bfloat16", hidden_size=512, intermediate_size=256, num_experts=8,
                  top_k=2)
    d.struct_size -= 4  # no header's size (sizeof - 8 is 0.5-0.10's released 96)
    with pytest.raises(moejit.InvalidArgumentError, match="struct_size"):
        _capi.check(lib.moejit_plan_warmup(compile_only_context.handle, ctypes.byref(d), None))


def test_dtype_codes():
    assert _capi.dtype_code("torch.bfloat16") == _capi.DTYPE_BF16
    assert _capi.dtype_code("half") == _capi.DTYPE_FP16
    assert _capi.dtype_code(_capi.DTYPE_INT64) == _capi.DTYPE_INT64
    for bad in ("float64", 0, 99, True):
        with pytest.raises(moejit.InvalidArgumentError):
            _capi.dtype_code(bad)


# ---- the 0.5 layer options (activation, alpha, interleaved, weights_transposed, biases)


GI = 16  # the gated tests' I: 2I != H, so a weight in the other layout has a wrong shape


def gpt_oss(**override):
    """gpt-oss's call: transposed weights [E, H, 2I] and [E, I, H], biases, interleaved."""
    args = dict(x=t((T, H)), selected_experts=t((T, K), "int64"),
                routing_weights=t((T, K), "float32"), w_gate=None, w_up=None,
                w_gate_up=t((E, H, 2 * GI)), w_down=t((E, GI, H)), swiglu_limit=7.0,
                activation="gpt_oss", alpha=None, interleaved=True, weights_transposed=True,
                b_gate_up=t((E, 2 * GI)), b_down=t((E, H)))
    args.update(override)
    return check_layer("fused_moe_gated", **args)


def test_good_gpt_oss_call():
    spec = gpt_oss()
    assert (spec.num_tokens, spec.hidden_size, spec.intermediate_size, spec.num_experts,
            spec.top_k) == (T, H, GI, E, K)
    assert spec.merged and spec.interleaved and spec.weights_transposed and spec.has_bias
    assert spec.activation == "gpt_oss" and spec.alpha == pytest.approx(1.702)
    assert spec.swiglu_limit == 7.0
    assert gpt_oss(alpha=0.0).alpha == pytest.approx(1.702)  # 0: the C default
    assert gpt_oss(alpha=2.5).alpha == 2.5


def test_the_04_call_has_the_04_spec():
    spec = check()
    assert (spec.activation, spec.alpha, spec.interleaved, spec.weights_transposed,
            spec.has_bias) == ("swiglu", 0.0, False, False, False)


BAD_GATED = {
    "activation": (dict(activation="relu"), "activation must be one of 'swiglu', 'gpt_oss'"),
    "alpha with swiglu": (dict(activation="swiglu", alpha=1.0), "alpha is only for"),
    "negative alpha": (dict(alpha=-1.0), "alpha must be None"),
    "infinite alpha": (dict(alpha=float("inf")), "alpha must be None"),
    "tiny alpha": (dict(alpha=1e-50), "alpha must be None"),
    "b_down missing": (dict(b_down=None), "b_gate_up is given but b_down is not"),
    "b_gate_up missing": (dict(b_gate_up=None), "b_down is given but b_gate_up is not"),
    "b_gate_up shape": (dict(b_gate_up=t((E, GI))), "b_gate_up must be [E, 2I] = [4, 32]"),
    "b_down shape": (dict(b_down=t((E, GI))), "b_down must be [E, H] = [4, 64], got [4, 16]"),
    "b_down dtype": (dict(b_down=t((E, H), "float16")), "b_down must have x's dtype"),
    "b_down device": (dict(b_down=t((E, H), device="cuda:1")), "b_down is on cuda:1"),
    "bias non-contiguous": (dict(b_gate_up=t((E, 2 * GI), contiguous=False)),
                            "b_gate_up must be contiguous"),
    "untransposed fc1": (dict(w_gate_up=t((E, 2 * GI, H))),
                         "w_gate_up must be [E, H, 2I] = [4, 64, 64] (H is the hidden size 64"),
    "odd 2I": (dict(w_gate_up=t((E, H, 2 * GI + 1))), "even last dim (2I)"),
    "untransposed down": (dict(w_down=t((E, H, GI))),
                          "w_down must be [E, I, H] = [4, 16, 64] (weights_transposed)"),
    "split interleaved": (dict(w_gate_up=None, w_gate=t((E, GI, H)), w_up=t((E, GI, H)),
                               w_down=t((E, H, GI)), b_gate_up=None, b_down=None,
                               weights_transposed=False),
                          "interleaved need the gate_up weight w_gate_up"),
    "split biases": (dict(w_gate_up=None, w_gate=t((E, GI, H)), w_up=t((E, GI, H)),
                          w_down=t((E, H, GI)), interleaved=False, weights_transposed=False),
                     "biases need the gate_up weight"),
}


@pytest.mark.parametrize("case", sorted(BAD_GATED))
def test_bad_gated_arguments(case):
    invalid(gpt_oss, *BAD_GATED[case], "fused_moe_gated: ")


def test_plan_desc_0_5_fields(lib):
    d = plan_desc(dtype="bf16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=K,
                  interleaved=True, activation="gpt_oss", swiglu_limit=7.0,
                  weights_transposed=True, has_bias=True)
    assert d.fc1_layout == _capi.FC1_INTERLEAVED and d.activation == _capi.ACTIVATION_GPT_OSS
    assert d.activation_alpha == pytest.approx(1.702) and d.swiglu_limit == 7.0
    assert d.weights_transposed == 1 and d.has_bias == 1
    d = plan_desc(dtype="bf16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=K,
                  merged=True, activation="gpt_oss", activation_alpha=1.25)
    assert d.fc1_layout == _capi.FC1_MERGED and d.activation_alpha == 1.25
    d = plan_desc(dtype="bf16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=K)
    assert (d.fc1_layout, d.activation, d.activation_alpha, d.weights_transposed,
            d.has_bias) == (_capi.FC1_SPLIT, _capi.ACTIVATION_SWIGLU, 0.0, 0, 0)


@pytest.mark.parametrize("override,message", [
    (dict(activation="gelu"), "activation"),
    (dict(activation_alpha=1.0), "alpha is only for"),
    (dict(activation="gpt_oss", activation_alpha=-1.0), "alpha must be"),
    (dict(activation="gpt_oss", activation_alpha="1.7"), "alpha must be"),
    (dict(has_bias=True), "need a gate_up weight"),
    (dict(weights_transposed=True), "need a gate_up weight"),
])
def test_plan_desc_0_5_checks(lib, override, message):
    args = dict(dtype="bfloat16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=K)
    args.update(override)
    with pytest.raises(moejit.InvalidArgumentError, match=message):
        plan_desc(**args)
