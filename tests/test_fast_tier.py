"""The fast tier (``scripts/test.sh -m "not slow"``) runs every test module at least once.

Read with :mod:`ast`: a module whose tests are all marked ``slow`` (by a module-level ``pytestmark`` or on each
test) would vanish from the fast tier, and with it the only quick signal that the module still imports and its
code still works.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_slow_mark(node: ast.expr) -> bool:
    """``pytest.mark.slow`` (or a list/tuple holding it)."""
    if isinstance(node, ast.List | ast.Tuple):
        return any(_is_slow_mark(e) for e in node.elts)
    return isinstance(node, ast.Attribute) and node.attr == "slow" and ast.unparse(node) == "pytest.mark.slow"


def fast_test_count(source: str) -> int:
    """Test functions of a module that the fast tier runs (not marked ``slow``, neither themselves nor by module).

    Args:
        source: the module's source text.
    """
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets) and _is_slow_mark(node.value):
            return 0
    return sum(1 for node in tree.body
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
               and not any(_is_slow_mark(d) for d in node.decorator_list))


def test_every_test_module_has_a_fast_test():
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 40
    without = [str(p.relative_to(TESTS.parent)) for p in modules if fast_test_count(p.read_text()) == 0]
    assert not without, "test modules the fast tier would skip entirely: " + ", ".join(without)


def test_slow_marks_are_recognised():
    assert fast_test_count("import pytest\npytestmark = pytest.mark.slow\ndef test_a(): pass\n") == 0
    assert fast_test_count("import pytest\npytestmark = [pytest.mark.slow]\ndef test_a(): pass\n") == 0
    assert fast_test_count("import pytest\n@pytest.mark.slow\ndef test_a(): pass\ndef test_b(): pass\n") == 1
    assert fast_test_count("def helper(): pass\ndef test_a(): pass\n") == 1
