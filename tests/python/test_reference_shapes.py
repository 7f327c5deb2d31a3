"""The reference shapes (docs/DESIGN.md §6) are written twice, once per language: the C++ tools'
table (tools/reference_shapes.hpp: moejit-bench, the CPU GEMM tests) and moejit_bench.SHAPES
(python -m moejit_bench, bench/bench_ep.py). tools/bench_group_gemm.py reads the C++ table;
its reader is the one used here, so this test checks the reader and both tables."""

import importlib.util
import os

import pytest

from conftest import REPO_ROOT

pytest.importorskip("torch")  # bench_group_gemm imports it
from moejit_bench import layer as bench  # noqa: E402

HEADER = os.path.join(REPO_ROOT, "tools", "reference_shapes.hpp")


@pytest.fixture(scope="module")
def reference_shapes():
    """tools/bench_group_gemm.py's reader of the C++ table, loaded once."""
    spec = importlib.util.spec_from_file_location(
        "bench_group_gemm", os.path.join(REPO_ROOT, "tools", "bench_group_gemm.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_shapes


def test_cpp_and_python_tables_agree(reference_shapes):
    cpp = reference_shapes(HEADER)
    python = [(name, *dims) for name, dims in bench.SHAPES.items()]
    assert len(cpp) == 8 and cpp == python


def test_a_changed_cpp_shape_is_seen(reference_shapes, tmp_path):
    with open(HEADER) as f:
        text = f.read()
    changed = tmp_path / "reference_shapes.hpp"
    changed.write_text(text.replace('{"mixtral-8x7b", 8192, 8, 4096, 14336, 2}',
                                    '{"mixtral-8x7b", 8192, 8, 4096, 14336, 3}'))
    shapes = dict((s[0], s[1:]) for s in reference_shapes(str(changed)))
    assert shapes["mixtral-8x7b"] == (8192, 8, 4096, 14336, 3) != bench.SHAPES["mixtral-8x7b"]


def test_a_table_without_shapes_is_an_error(reference_shapes, tmp_path):
    empty = tmp_path / "reference_shapes.hpp"
    empty.write_text("// nothing here\n")
    with pytest.raises(RuntimeError, match="no shapes found"):
        reference_shapes(str(empty))
