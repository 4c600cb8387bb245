"""The suite's files can all be collected in one run: pytest imports test modules by basename (the test folders
are not packages), so two test files of the same name would stop the collection of the whole suite."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def test_test_file_basenames_are_unique():
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    assert len(where) > 50, "the suite's test files were found"
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
