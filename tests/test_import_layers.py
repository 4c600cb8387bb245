"""The layer table of ARCHITECTURE.md, enforced on the source: imports point down only.

| layer | modules | never imports |
|---|---|---|
| orchestration | ``assets``, ``resources``, ``hir_pipeline.definitions``, ``hir_pipeline.cli`` | - |
| distributed data jobs | ``spark_jobs`` | dagster, orchestration |
| core library | the rest of ``hir_pipeline`` | dagster, pyspark, delta-spark, ``spark_jobs``, orchestration |

``hir_pipeline.model`` and ``hir_pipeline.training`` import with torch alone: everything they import, directly or
through other project modules, is the standard library, torch or numpy.

Imports are read with :mod:`ast` (no module is executed), including imports inside functions and under
``TYPE_CHECKING``: a lazy import is still a dependency. The command line (``hir_pipeline.cli``) drives Dagster, so
it counts as orchestration beside ``definitions``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hir_pipeline", "spark_jobs", "assets", "resources")
#: Modules of the ``hir_pipeline`` package that belong to the orchestration layer.
ORCHESTRATION_IN_CORE = frozenset({"hir_pipeline.definitions", "hir_pipeline.cli"})
#: Core modules allowed to import pyspark: clearly separated I/O modules (none today).
CORE_IO_MODULES: frozenset[str] = frozenset()
#: Top-level imports each layer must never make.
FORBIDDEN = {
    "spark_jobs": {"dagster", "assets", "resources"},
    "core": {"dagster", "assets", "resources", "spark_jobs", "pyspark", "delta"},
}
#: Packages whose every module imports with torch alone, and the third-party packages that allows.
TORCH_ONLY_PACKAGES = ("hir_pipeline.model", "hir_pipeline.training")
TORCH_ONLY_THIRD_PARTY = frozenset({"torch", "numpy"})


@dataclass(frozen=True)
class Import:
    """One imported name: ``target`` is the dotted module (or module attribute) as written, made absolute."""

    importer: str
    target: str
    line: int


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project packages under ``root``.

    Args:
        root: the repository root.
    """
    files: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    return files


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import statement of one module (top level, in functions, under ``TYPE_CHECKING``), made absolute.

    Args:
        module: the module's dotted name.
        path: its source file.
    """
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append(Import(module, base, node.lineno))
            found += [Import(module, f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def layer_of(module: str) -> str:
    """``orchestration``, ``spark_jobs`` or ``core``.

    Args:
        module: a dotted project module name.
    """
    top = module.split(".")[0]
    if top in ("assets", "resources") or module in ORCHESTRATION_IN_CORE:
        return "orchestration"
    return "spark_jobs" if top == "spark_jobs" else "core"


def project_module(target: str, files: dict[str, Path]) -> str | None:
    """The project module an import refers to (``a.b.name`` -> ``a.b`` when ``name`` is not a module), or None.

    Args:
        target: a dotted import target.
        files: :func:`module_files`.
    """
    while target and target not in files:
        target = target.rpartition(".")[0]
    return target or None


def layer_violations(root: Path) -> list[str]:
    """One line per import that breaks the layer table (module docstring), empty when the tree follows it.

    Args:
        root: the repository root.
    """
    files = module_files(root)
    graph = {module: imports_of(module, path) for module, path in files.items()}
    problems: list[str] = []
    for module, imports in graph.items():
        forbidden = FORBIDDEN.get(layer_of(module), set())
        if module in CORE_IO_MODULES:
            forbidden = forbidden - {"pyspark", "delta"}
        seen_lines: set[int] = set()  # ``from a import b`` gives ``a`` and ``a.b``: one report per statement
        for imp in imports:
            if imp.target.split(".")[0] in forbidden and imp.line not in seen_lines:
                seen_lines.add(imp.line)
                problems.append(f"{files[module].relative_to(root)}:{imp.line}: {layer_of(module)} module "
                                f"{module} imports {imp.target}")
    for module in sorted(m for m in files if m.startswith(TORCH_ONLY_PACKAGES)):
        reported: set[tuple[str, int]] = set()
        for imp, chain in _reachable_imports(module, graph, files):
            top = imp.target.split(".")[0]
            if (imp.importer, imp.line) in reported:
                continue
            if (top not in TORCH_ONLY_THIRD_PARTY and top not in sys.stdlib_module_names and top != "__future__"
                    and project_module(imp.target, files) is None):
                reported.add((imp.importer, imp.line))
                via = " -> ".join(chain)
                problems.append(f"{files[imp.importer].relative_to(root)}:{imp.line}: {module} must import with "
                                f"torch alone but reaches {imp.target} (via {via})")
    return problems


def _reachable_imports(start: str, graph: dict[str, list[Import]], files: dict[str, Path]):
    """Every import made by ``start`` or by a project module it imports (transitively), with the module chain."""
    seen, stack = {start}, [(start, [start])]
    while stack:
        module, chain = stack.pop()
        for imp in graph[module]:
            yield imp, chain
            target = project_module(imp.target, files)
            if target is not None and target not in seen:
                seen.add(target)
                stack.append((target, [*chain, target]))


def import_cycles(root: Path) -> list[list[str]]:
    """Groups of project modules that import each other, directly or through others (strongly connected
    components of the import graph, imports of a module's own parent packages left out).

    Args:
        root: the repository root.
    """
    files = module_files(root)
    edges: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = {project_module(imp.target, files) for imp in imports_of(module, path)}
        edges[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


def test_imports_follow_the_layer_table():
    problems = layer_violations(ROOT)
    assert not problems, "imports that break the layer table (ARCHITECTURE.md):\n" + "\n".join(problems)


def test_project_modules_have_no_import_cycle():
    cycles = import_cycles(ROOT)
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_checks_report_each_kind_of_violation(tmp_path):
    root = _write(tmp_path, {
        "hir_pipeline/__init__.py": "",
        "hir_pipeline/definitions.py": "import dagster\nimport spark_jobs.jobs\n",
        "hir_pipeline/core.py": "def f():\n    from pyspark.sql import DataFrame\n",
        "hir_pipeline/helpers.py": "import pandas\n",
        "hir_pipeline/model/__init__.py": "",
        "hir_pipeline/model/net.py": "import torch\nimport numpy\nfrom ..helpers import x\n",
        "spark_jobs/__init__.py": "",
        "spark_jobs/jobs.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dagster as dg\n"
                              "from spark_jobs import other\n",
        "spark_jobs/other.py": "from spark_jobs.jobs import y\n",
        "assets/__init__.py": "",
        "assets/a.py": "import dagster\nimport pyspark\nimport spark_jobs.jobs\n",
    })
    problems = layer_violations(root)
    assert any("hir_pipeline/core.py:2: core module hir_pipeline.core imports pyspark.sql" in p for p in problems)
    assert any("spark_jobs/jobs.py:3: spark_jobs module spark_jobs.jobs imports dagster" in p for p in problems)
    assert any("hir_pipeline.model.net must import with torch alone but reaches pandas "
               "(via hir_pipeline.model.net -> hir_pipeline.helpers)" in p for p in problems)
    assert len(problems) == 3, problems  # orchestration (definitions, assets) may import anything
    assert import_cycles(root) == [["spark_jobs.jobs", "spark_jobs.other"]]
