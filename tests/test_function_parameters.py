"""Project rule: a function takes at most eight parameters; beyond that, related ones travel in a settings object
(a frozen dataclass) or a small typed group (a ``NamedTuple``).

Read with :mod:`ast` (no module is executed). Positional-only, ordinary and keyword-only parameters count;
``*args``, ``**kwargs`` and a leading ``self`` / ``cls`` do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hir_pipeline", "spark_jobs", "assets", "resources")
#: The most parameters a function may take.
MAX_PARAMETERS = 8


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Named parameters of a function, a leading ``self`` / ``cls`` left out.

    Args:
        node: the function's definition.
    """
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return len(names) - (1 if names and names[0] in ("self", "cls") else 0)


def wide_functions(root: Path) -> list[str]:
    """``path:line: name takes N parameters`` for every function of the project packages under ``root`` that
    takes more than :data:`MAX_PARAMETERS`.

    Args:
        root: the repository root.
    """
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            wide = [(node.lineno, node.name, parameter_count(node))
                    for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
            found += [f"{path.relative_to(root)}:{line}: {name} takes {count} parameters"
                      for line, name, count in sorted(wide) if count > MAX_PARAMETERS]
    return found


def test_no_function_takes_more_than_eight_parameters():
    wide = wide_functions(ROOT)
    assert not wide, (f"functions with more than {MAX_PARAMETERS} parameters (group them into a settings object):\n"
                      + "\n".join(wide))


def test_check_counts_named_parameters_only(tmp_path):
    (tmp_path / "hir_pipeline").mkdir()
    (tmp_path / "hir_pipeline" / "mod.py").write_text(
        "def ok(a, b, c, d, e, f, g, h, *args, **kwargs):\n    pass\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f, g, h):\n        pass\n"
        "    @classmethod\n"
        "    def build(cls, a, b, c, d, e, f, g, h, i):\n        pass\n"
        "async def wide(a, /, b, c, d, e, f, g, h, *, i=1):\n"
        "    def inner(a, b, c, d, e, f, g, h, i, j):\n        pass\n"
    )
    assert wide_functions(tmp_path) == [
        "hir_pipeline/mod.py:7: build takes 9 parameters",
        "hir_pipeline/mod.py:9: wide takes 9 parameters",
        "hir_pipeline/mod.py:10: inner takes 10 parameters",
    ]
