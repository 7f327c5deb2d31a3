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


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_layer_arguments(case):
    override, message = BAD[case]
    with pytest.raises(moejit.InvalidArgumentError) as info:
        check(**override)
    assert message in info.value.message
    assert info.value.message.startswith("fused_moe: ")
    assert info.value.status == _capi.ERROR_INVALID_ARGUMENT


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
    d.struct_size -= 8
    with pytest.raises(moejit.InvalidArgumentError, match="struct_size"):
        _capi.check(lib.moejit_plan_warmup(compile_only_context.handle, ctypes.byref(d), None))


def test_dtype_codes():
    assert _capi.dtype_code("torch.bfloat16") == _capi.DTYPE_BF16
    assert _capi.dtype_code("half") == _capi.DTYPE_FP16
    assert _capi.dtype_code(_capi.DTYPE_INT64) == _capi.DTYPE_INT64
    for bad in ("float64", 0, 99, True):
        with pytest.raises(moejit.InvalidArgumentError):
            _capi.dtype_code(bad)
