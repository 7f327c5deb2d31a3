"""The moejit package's imports form no circle (issue 32 item 4), read from the source with
ast: every import statement anywhere in a module (at the top or inside a function: a lazy
import is still a dependency), and importlib.import_module calls with a constant name. Also:
every import of the package's own modules names one that exists, and the product imports no
workshop code (bench/, its peer adapters, the tests)."""

import ast
import os

import pytest

PACKAGE = "moejit"
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", PACKAGE)
# Top-level names of the workshop, which the product never imports.
WORKSHOP = ("moejit_bench", "bench", "peers", "peers_fast", "conftest", "hf_families",
            "moe_emulation", "hf_emulation",
            "optional_imports", "cuda_graph_step")


def package_modules(root: str, package: str):
    """{dotted module name: path} of every .py file under root (a package __init__.py is the
    package's own name), and of every .py.in the build configures into one (_build_info)."""
    modules = {}
    for folder, _, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        parts = [package] + ([] if rel == "." else rel.split(os.sep))
        for name in files:
            stem = name[:-3] if name.endswith(".py") else name[:-6] if name.endswith(".py.in") \
                else None
            if stem is None:
                continue
            dotted = parts if name == "__init__.py" else parts + [stem]
            modules[".".join(dotted)] = os.path.join(folder, name)
    return modules


def _resolve(name: str, level: int, importer: str, is_package: bool) -> str:
    """The absolute module name of `from <level dots><name> import ...` in importer."""
    if level == 0:
        return name
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:-(level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: str, modules: dict):
    """The absolute names of every module this module imports (the package's modules and
    others), with the line of each import."""
    is_package = path.endswith("__init__.py")
    if path.endswith(".py.in"):  # a template with @PLACEHOLDERS@; it imports nothing
        return []
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node.module or "", node.level, module, is_package)
            for alias in node.names:
                # `from pkg import sub` imports the submodule where there is one
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in modules else target, node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            name = node.args[0].value
            level = len(name) - len(name.lstrip("."))
            found.append((_resolve(name[level:], level, module, is_package), node.lineno))
    return found


def import_graph(root: str, package: str):
    """({module: {imported module of the package}}, [(module, line, missing name)])."""
    modules = package_modules(root, package)
    graph, missing = {}, []
    for module, path in modules.items():
        edges = set()
        for name, line in imports_of(module, path, modules):
            if name != package and not name.startswith(package + "."):
                continue
            if name not in modules:  # every name imported is a module (see imports_of)
                missing.append((module, line, name))
                continue
            if name != module:
                edges.add(name)
        graph[module] = edges
    return graph, missing


def find_cycle(graph):
    """One cycle as a list of modules [a, b, ..., a], or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, stack)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


# ------------------------------------------------------------------ the package


def test_package_has_no_import_cycle():
    graph, _ = import_graph(PACKAGE_DIR, PACKAGE)
    assert "moejit.torch" in graph and "moejit.distributed" in graph, sorted(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_package_import_exists():
    _, missing = import_graph(PACKAGE_DIR, PACKAGE)
    assert not missing, [f"{m} line {line} imports {name}, which is not in the package"
                         for m, line, name in missing]


def test_the_product_imports_no_workshop_code():
    modules = package_modules(PACKAGE_DIR, PACKAGE)
    bad = [f"{module} line {line}: {name}"
           for module, path in modules.items()
           for name, line in imports_of(module, path, modules)
           if name.split(".")[0] in WORKSHOP or name.split(".")[-1] in WORKSHOP]
    assert not bad, bad


def test_torch_and_distributed_share_functional_not_each_other():
    graph, _ = import_graph(PACKAGE_DIR, PACKAGE)
    assert "moejit.torch" not in graph["moejit.distributed"]
    assert "moejit._functional" in graph["moejit.distributed"]
    assert "moejit._functional" in graph["moejit.torch"]


# ------------------------------------------------------------------ the checker can fail


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


@pytest.mark.parametrize("how", ["top_level", "lazy", "importlib", "subpackage"])
def test_checker_finds_a_cycle(tmp_path, how):
    files = {"__init__.py": "", "c.py": "import os\n"}
    if how == "top_level":
        files.update({"a.py": "from . import b\n", "b.py": "from .a import f\n"})
    elif how == "lazy":
        files.update({"a.py": "def f():\n    from . import b\n",
                      "b.py": "def g():\n    from .a import f\n"})
    elif how == "importlib":
        files.update({"a.py": "import importlib\nimportlib.import_module('.b', __package__)\n",
                      "b.py": "import pkg.a\n"})
    else:
        files.update({"a.py": "from .sub import d\n", "sub/__init__.py": "",
                      "sub/d.py": "from .. import a\n"})
    _write(tmp_path, files)
    graph, missing = import_graph(str(tmp_path), "pkg")
    assert not missing
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and "pkg.a" in cycle, (graph, cycle)


def test_checker_passes_a_tree_and_reports_a_missing_module(tmp_path):
    _write(tmp_path, {"__init__.py": "from . import a\n", "a.py": "from .b import x\n",
                      "b.py": "x = 1\n", "c.py": "def f():\n    from .gone import y\n"})
    graph, missing = import_graph(str(tmp_path), "pkg")
    assert find_cycle(graph) is None
    assert graph["pkg"] == {"pkg.a"} and graph["pkg.a"] == {"pkg.b"}
    assert missing == [("pkg.c", 2, "pkg.gone")]
