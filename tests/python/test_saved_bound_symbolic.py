"""The saved-buffer bound under symbolic shapes (the fake kernels of torch.compile with
dynamic=True): the library's affine terms are asked with the layer's dimensions as ints and
only the token (or row) count stays symbolic. 0.11's first cut passed SymInts into a cached
query and every dynamic compile failed with "unhashable type: non-nested SymInt" (H200 run,
test_torch_op_gpu.py::test_opcheck and test_compile_fullgraph_dynamic)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install moejit[torch])")
from torch._dynamo.source import ConstantSource  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from moejit import _experts_op, _op  # noqa: E402


def _symint(env, name, hint):
    return env.create_symintnode(env.create_symbol(hint, source=ConstantSource(name)), hint=hint)


def test_saved_bound_symbolic_tokens_and_dims(lib):
    env = ShapeEnv()
    for tokens, hidden, inter, experts, top_k in ((5, 64, 32, 4, 2), (3, 2048, 768, 128, 8)):
        bound = _op.saved_bytes_bound(_symint(env, f"T{tokens}", tokens), _symint(env, f"H{hidden}", hidden),
                                      _symint(env, f"I{inter}", inter), experts, top_k, 2)
        assert isinstance(bound, torch.SymInt)
        for t in (tokens, 3 * tokens + 7):
            concrete = _op.saved_bytes_bound(t, hidden, inter, experts, top_k, 2)
            assert int(bound.node.expr.subs({s: t for s in bound.node.expr.free_symbols})) == concrete


def test_experts_saved_bound_symbolic_rows(lib):
    env = ShapeEnv()
    bound = _experts_op.experts_saved_bytes_bound(_symint(env, "R", 7), _symint(env, "I", 32), 2)
    assert isinstance(bound, torch.SymInt)
    for rows in (7, 1000):
        concrete = _experts_op.experts_saved_bytes_bound(rows, 32, 2)
        assert int(bound.node.expr.subs({s: rows for s in bound.node.expr.free_symbols})) == concrete
