"""A seeded, reproducible shuffle of the collected tests (``--shuffle-seed N`` or ``HIR_TEST_SHUFFLE_SEED=N``).

Module order is shuffled, and so is the test order inside each module, but each module's tests stay contiguous:
module-scoped fixtures are then built once, as in an unshuffled run, and ``--dist loadfile`` still hands out whole
files. The result depends only on the seed and the set of test ids, never on the order pytest collected them in
or on ``PYTHONHASHSEED`` (string seeds go through SHA-512 in :class:`random.Random`), so every xdist worker
computes the same order and a failing order can be replayed from the seed printed in the header.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

#: Environment variable read when ``--shuffle-seed`` is not given.
SHUFFLE_ENV = "HIR_TEST_SHUFFLE_SEED"

T = TypeVar("T")


def module_of(nodeid: str) -> str:
    """``tests/a/test_b.py::test_c[1]`` -> ``tests/a/test_b.py``."""
    return nodeid.split("::", 1)[0]


def shuffle_seed(option: int | None, environ: dict[str, str] | None = None) -> int | None:
    """The seed from the command line option, else from :data:`SHUFFLE_ENV`; ``None``: no shuffle."""
    if option is not None:
        return option
    value = (os.environ if environ is None else environ).get(SHUFFLE_ENV, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{SHUFFLE_ENV} must be an integer seed, not {value!r}") from None


def shuffled(items: Sequence[T], seed: int, nodeid: Callable[[T], str]) -> list[T]:
    """``items`` with modules in a seeded order and each module's tests, kept together, in a seeded order.

    Each module's inner order comes from its own generator (seed and module path), so running one module alone with
    the same seed replays the order its tests had in the whole run.
    """
    by_module: dict[str, list[T]] = {}
    for item in sorted(items, key=nodeid):  # sorted first: collection order must not change the result
        by_module.setdefault(module_of(nodeid(item)), []).append(item)
    modules = sorted(by_module)
    random.Random(f"hir-shuffle:{seed}").shuffle(modules)
    out: list[T] = []
    for module in modules:
        tests = by_module[module]
        random.Random(f"hir-shuffle:{seed}:{module}").shuffle(tests)
        out.extend(tests)
    return out
