"""moejit.torch.fp8_weight_cache without a GPU: which calls FILL and which USE, on CPU tensors
and a stand-in plan (the library's side, the C ABI's FILL/USE, is tests/gpu/test_fp8_layer_gpu.cpp
and tests/cpu/test_fp8_layer_cpu.cpp)."""

import threading

import pytest

torch = pytest.importorskip("torch")
import moejit.torch as mt  # noqa: E402
from moejit import _fp8_weight_cache as wc  # noqa: E402
from moejit import errors  # noqa: E402


class FakePlan:
    def weight_cache_size(self):
        return 4096


def weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w_gate_up": torch.randn(4, 8, 16, generator=g), "w_down": torch.randn(4, 16, 4, generator=g)}


def test_outside_a_block_nothing_is_cached():
    assert wc.call_cache(FakePlan(), weights(), torch.device("cpu")) == (None, "none")
    assert not wc.active()


def test_first_call_fills_later_calls_use_the_same_buffer():
    w = weights()
    with mt.fp8_weight_cache():
        assert wc.active()
        buf, mode = wc.call_cache(FakePlan(), w, torch.device("cpu"))
        assert mode == "fill" and buf.numel() == 4096 and buf.dtype == torch.uint8
        for _ in range(3):  # the other micro-batches, forward and backward
            again, mode = wc.call_cache(FakePlan(), w, torch.device("cpu"))
            assert mode == "use" and again is buf
    # The block's end drops the buffers: the next step quantizes again.
    assert wc.call_cache(FakePlan(), w, torch.device("cpu")) == (None, "none")
    with mt.fp8_weight_cache():
        assert wc.call_cache(FakePlan(), w, torch.device("cpu"))[1] == "fill"


def test_a_weight_changed_in_place_is_quantized_again():
    w = weights()
    with mt.fp8_weight_cache():
        buf, _ = wc.call_cache(FakePlan(), w, torch.device("cpu"))
        with torch.no_grad():
            w["w_down"].add_(1.0)  # an optimizer step taken inside the block
        again, mode = wc.call_cache(FakePlan(), w, torch.device("cpu"))
        assert mode == "fill" and again is buf
        assert wc.call_cache(FakePlan(), w, torch.device("cpu"))[1] == "use"


def test_other_weights_are_another_entry():
    a, b = weights(0), weights(1)
    with mt.fp8_weight_cache():
        buf_a, mode_a = wc.call_cache(FakePlan(), a, torch.device("cpu"))
        buf_b, mode_b = wc.call_cache(FakePlan(), b, torch.device("cpu"))
        assert (mode_a, mode_b) == ("fill", "fill") and buf_a is not buf_b
        # The same storage seen through another tensor object is not trusted to be the same.
        view = {n: t.view(t.shape) for n, t in a.items()}
        assert wc.call_cache(FakePlan(), view, torch.device("cpu"))[1] == "fill"
        assert wc.call_cache(FakePlan(), a, torch.device("cpu"))[1] == "use"


def test_untracked_weights_are_quantized_every_call():
    with torch.inference_mode():
        w = weights()
    with mt.fp8_weight_cache():
        assert wc.call_cache(FakePlan(), w, torch.device("cpu"))[1] == "fill"
        assert wc.call_cache(FakePlan(), w, torch.device("cpu"))[1] == "fill"


def test_blocks_do_not_nest_and_are_process_wide():
    w = weights()
    with mt.fp8_weight_cache():
        with pytest.raises(errors.InvalidArgumentError, match="do not nest"):
            with mt.fp8_weight_cache():
                pass
        buf, _ = wc.call_cache(FakePlan(), w, torch.device("cpu"))
        # autograd runs CUDA backwards on its own thread: that thread must see the block
        seen = []
        t = threading.Thread(target=lambda: seen.append(wc.call_cache(FakePlan(), w,
                                                                      torch.device("cpu"))))
        t.start()
        t.join()
        assert seen[0][1] == "use" and seen[0][0] is buf
    assert not wc.active()


def test_weights_that_are_not_leaves_are_not_cached():
    base = weights()
    with mt.fp8_weight_cache():
        for _ in range(2):  # a weight rebuilt per call (a cast, a gathered copy): no buffer piles up
            rebuilt = {n: (t.requires_grad_() * 1.0) for n, t in base.items()}
            assert wc.call_cache(FakePlan(), rebuilt, torch.device("cpu")) == (None, "none")


def test_an_entry_holds_its_weights():
    with mt.fp8_weight_cache():
        w = weights(5)
        wc.call_cache(FakePlan(), w, torch.device("cpu"))
        (entry,) = wc._entries.values()
        assert all(a is b for a, b in zip(entry.weights, (w[n] for n in sorted(w))))


def test_an_exception_closes_the_block():
    with pytest.raises(KeyError):
        with mt.fp8_weight_cache():
            raise KeyError("x")
    assert not wc.active()
