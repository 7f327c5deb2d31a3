"""The layer's recipe argument without a GPU (issue 31, layer and API): the ctypes
moejit_plan_desc_t has `recipe` where moejit.h puts it and defaults to bf16, the Python entry
points check recipe= before anything runs (an unknown one is a ValueError naming the choices),
the custom ops carry it with the bf16 default, and the library's saved-size bound of the FP8
recipe is about half the bf16 one."""

import ctypes

import pytest

import moejit
from moejit import _capi, core

torch = pytest.importorskip("torch")
import moejit.torch as mt  # noqa: E402
from moejit import _op  # noqa: E402


def test_plan_desc_has_recipe_after_the_named_padding():
    fields = [f for f, _ in _capi.PlanDesc._fields_]
    assert fields[-3:] == ["reserved_0_5_tail", "recipe", "routing_weights_in_backward"]
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert _capi.PlanDesc.recipe.offset == 96
        assert ctypes.sizeof(_capi.PlanDesc) == 104


def test_recipe_values_and_default(lib):
    assert core.RECIPES == {"bf16": 0, "fp8-block": 1}
    assert _capi.c_init_struct(_capi.PlanDesc).recipe == 0  # the library's init: bf16
    desc = core.plan_desc(dtype="bfloat16", hidden_size=256, intermediate_size=128,
                          num_experts=4, top_k=2)
    assert desc.recipe == 0
    desc = core.plan_desc(dtype="bfloat16", hidden_size=256, intermediate_size=128,
                          num_experts=4, top_k=2, recipe="fp8-block")
    assert desc.recipe == 1


def test_args_carry_the_weight_cache_and_init_to_none(lib):
    for cls, offset, size in ((_capi.ForwardArgs, 136, 160), (_capi.BackwardArgs, 184, 208)):
        fields = [f for f, _ in cls._fields_]
        # 0.12 named the backward's reserved field consume_saved (0: as in 0.11).
        last = "reserved_0_11" if cls is _capi.ForwardArgs else "consume_saved"
        assert fields[-4:] == ["weight_cache", "weight_cache_size", "weight_cache_mode", last]
        if ctypes.sizeof(ctypes.c_void_p) == 8:
            assert cls.weight_cache.offset == offset and ctypes.sizeof(cls) == size
        args = _capi.c_init_struct(cls)
        assert (args.weight_cache, args.weight_cache_size, args.weight_cache_mode) == (None, 0, 0)
    assert (_capi.WEIGHT_CACHE_NONE, _capi.WEIGHT_CACHE_FILL, _capi.WEIGHT_CACHE_USE) == (0, 1, 2)
    assert lib.has("moejit_plan_weight_cache_size")
    assert lib.has("moejit_plan_cached_workspace_size")


@pytest.mark.parametrize("bad", ["off", "FILL", "", None, 1])
def test_unknown_weight_cache_mode_names_the_choices(bad):
    with pytest.raises(ValueError, match=r"weight_cache_mode is .*expected one of 'none', 'fill', 'use'"):
        core.weight_cache_mode_code(bad)


@pytest.mark.parametrize("bad", ["fp8", "FP8-BLOCK", "", None, 1])
def test_unknown_recipe_names_the_choices(bad):
    with pytest.raises(ValueError, match=r"recipe must be one of 'bf16', 'fp8-block'"):
        core.plan_desc(dtype="bfloat16", hidden_size=256, intermediate_size=128,
                       num_experts=4, top_k=2, recipe=bad)
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    sel = torch.zeros(4, 2, dtype=torch.int64)
    rw = torch.ones(4, 2)
    w = torch.zeros(4, 128, 256, dtype=torch.bfloat16)
    wd = torch.zeros(4, 256, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"fused_moe: recipe must be one of 'bf16', 'fp8-block'"):
        mt.fused_moe(x, sel, rw, w, w, wd, recipe=bad)
    with pytest.raises(ValueError, match=r"recipe must be one of"):
        mt.fused_moe_merged(x, sel, rw, torch.cat([w, w], 1), wd, recipe=bad)
    with pytest.raises(ValueError, match=r"MoEExperts: recipe must be one of"):
        mt.MoEExperts(4, 256, 128, recipe=bad, device="cpu")


def test_fp8_refuses_main_grads_and_gated_options():
    with pytest.raises(ValueError, match="main_grad"):
        mt.MoEExperts(4, 256, 128, recipe="fp8-block", accumulate_into_main_grad=True,
                      device="cpu")
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    sel = torch.zeros(4, 2, dtype=torch.int64)
    rw = torch.ones(4, 2)
    wgu = torch.zeros(4, 256, 256, dtype=torch.bfloat16)
    wd = torch.zeros(4, 256, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="fp8-block"):
        mt.fused_moe_merged(x, sel, rw, wgu, wd, recipe="fp8-block", interleaved=True)
    with pytest.raises(ValueError, match="main_grads"):
        mt.fused_moe_merged(x, sel, rw, wgu, wd, recipe="fp8-block",
                            main_grads=(torch.zeros(4, 256, 256), torch.zeros(4, 256, 128)))


def test_moe_experts_keeps_its_recipe():
    m = mt.MoEExperts(4, 256, 128, device="meta")
    assert m.recipe == "bf16" and "recipe" not in m.extra_repr()
    m = mt.MoEExperts(4, 256, 128, merged=True, recipe="fp8-block", device="meta")
    assert m.recipe == "fp8-block" and "recipe='fp8-block'" in m.extra_repr()


def test_ops_carry_recipe_with_the_bf16_default():
    for name in ("fused_moe", "fused_moe_merged", "fused_moe_backward",
                 "fused_moe_merged_backward"):
        schema = str(getattr(torch.ops.moejit, name).default._schema)
        assert 'str recipe="bf16"' in schema, schema


def test_fp8_saved_bound_is_about_half(lib):
    for H, I, E, k in ((2048, 768, 128, 8), (7168, 2048, 256, 8), (4096, 14336, 8, 2)):
        bf16 = _op.saved_bytes_bound(8192, H, I, E, k)
        fp8 = _op.saved_bytes_bound(8192, H, I, E, k, recipe="fp8-block")
        assert 0.45 < fp8 / bf16 < 0.6, (H, I, fp8, bf16)


def test_library_refuses_fp8_shapes_it_does_not_run(lib):
    for field, value, needle in (("hidden_size", 200, "multiples of 128"),
                                 ("intermediate_size", 64, "multiples of 128")):
        desc = core.plan_desc(dtype="bfloat16", hidden_size=256, intermediate_size=128,
                              num_experts=4, top_k=2, recipe="fp8-block")
        setattr(desc, field, value)
        per_token, constant = ctypes.c_int64(), ctypes.c_int64()
        with pytest.raises(moejit.MoejitError, match=needle):
            _capi.check(lib.moejit_saved_size_terms(ctypes.byref(desc), ctypes.byref(per_token),
                                                    ctypes.byref(constant)))
    desc = core.plan_desc(dtype="float16", hidden_size=256, intermediate_size=128,
                          num_experts=4, top_k=2, recipe="fp8-block")
    with pytest.raises(moejit.MoejitError, match="dtype"):
        _capi.check(lib.moejit_saved_size_terms(ctypes.byref(desc), ctypes.byref(ctypes.c_int64()),
                                                ctypes.byref(ctypes.c_int64())))
    desc.recipe = 9
    with pytest.raises(moejit.InvalidArgumentError, match="desc->recipe"):
        _capi.check(lib.moejit_saved_size_terms(ctypes.byref(desc), ctypes.byref(ctypes.c_int64()),
                                                ctypes.byref(ctypes.c_int64())))
