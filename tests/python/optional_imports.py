"""Module-level skips for the tests' optional dependencies (torch, transformers): on any
ImportError, not only ModuleNotFoundError (pytest 9's importorskip skips only that one), so an
installed package that fails to import, or a transformers without the module a test needs,
skips the test module with the same reason."""

import importlib

import pytest

TORCH_MISSING = "torch is not installed"
TRANSFORMERS_MISSING = "transformers (>= 5) is not installed"


def import_or_skip(module: str, reason: str, *names: str):
    """The module imported (with names: a tuple of those attributes of it, as `from module import
    name, ...`); on an ImportError, or a missing name, the calling test module is skipped."""
    __tracebackhide__ = True  # the skip is reported at the test module's line
    try:
        imported = importlib.import_module(module)
        return tuple(getattr(imported, name) for name in names) if names else imported
    except (ImportError, AttributeError):
        pytest.skip(reason, allow_module_level=True)


def torch_and_transformers():
    """(torch, transformers.integrations.moe), or the test module skipped: what the transformers
    tests import first (the experts integration is in transformers >= 5)."""
    __tracebackhide__ = True
    torch = import_or_skip("torch", TORCH_MISSING)
    return torch, import_or_skip("transformers.integrations.moe", TRANSFORMERS_MISSING)
