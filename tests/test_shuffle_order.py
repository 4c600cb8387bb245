"""The seeded test-order shuffle (tests/shuffle_order.py, wired in tests/conftest.py) keeps shuffling, keeps each
module's tests together, and stays reproducible from its seed, in this process and in another one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shuffle_order import SHUFFLE_ENV, module_of, shuffle_seed, shuffled

ROOT = Path(__file__).resolve().parents[1]
IDS = [f"tests/m{m}/test_{m}.py::test_{t}" for m in "abcdef" for t in range(8)]


def _order(ids: list[str], seed: int) -> list[str]:
    return shuffled(ids, seed, nodeid=lambda nodeid: nodeid)


def _modules(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(module_of(i) for i in ids))


def test_same_seed_same_order_whatever_the_collection_order():
    assert _order(IDS, 5) == _order(list(reversed(IDS)), 5) == _order(sorted(IDS, key=hash), 5)


def test_it_shuffles_modules_and_tests_and_seeds_differ():
    orders = [_order(IDS, seed) for seed in range(4)]
    for order in orders:
        assert sorted(order) == sorted(IDS)  # a permutation: nothing lost or repeated
        assert _modules(order) != _modules(IDS)
        assert any([i for i in order if module_of(i) == m] != [i for i in IDS if module_of(i) == m]
                   for m in _modules(IDS))
    assert len({tuple(o) for o in orders}) == len(orders)


def test_each_module_stays_contiguous_and_replays_alone():
    order = _order(IDS, 11)
    modules = [module_of(i) for i in order]
    assert len(_modules(order)) == len(set(modules))  # no module comes back after another started
    one = _modules(IDS)[2]
    alone = _order([i for i in IDS if module_of(i) == one], 11)
    assert alone == [i for i in order if module_of(i) == one]


def test_seed_from_option_else_environment():
    assert shuffle_seed(3, {SHUFFLE_ENV: "9"}) == 3
    assert shuffle_seed(None, {SHUFFLE_ENV: " 9 "}) == 9
    assert shuffle_seed(None, {SHUFFLE_ENV: ""}) is None and shuffle_seed(None, {}) is None
    with pytest.raises(ValueError, match=SHUFFLE_ENV):
        shuffle_seed(None, {SHUFFLE_ENV: "random"})


def test_conftest_applies_the_seed_and_prints_it_in_another_process():
    """The hook is wired: a fresh pytest collects two real modules in the order the seed gives, and says the seed."""
    files = ["tests/hir_pipeline/evaluation/test_metrics.py", "tests/hir_pipeline/publish/test_stable_ids.py"]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env[SHUFFLE_ENV] = "7"
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", "-p", "no:xdist",
                          *files], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test order: shuffled, seed 7 (replay: --shuffle-seed 7 -n 0)" in out.stdout, out.stdout
    # Collected tree: "<Module test_x.py>" then its "<Function test_y>"s (test basenames are unique in the suite).
    path_of = {Path(f).name: f for f in files}
    ids, module = [], ""
    for line in out.stdout.splitlines():
        if m := re.fullmatch(r"\s*<Module (\S+)>", line):
            module = path_of[m.group(1)]
        elif m := re.fullmatch(r"\s*<Function (\S+)>", line):
            ids.append(f"{module}::{m.group(1)}")
    assert len(ids) > 10 and ids == _order(ids, 7)
    assert ids != sorted(ids)
