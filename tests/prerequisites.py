"""What the suite needs from the machine: a missing prerequisite fails the test that needs it, with one line saying
how to install it, unless ``HIR_ALLOW_MISSING_SERVICES=1`` opts out (then the test skips, saying why). Only the CUDA
test skips on its own. A green run therefore means every test ran."""

from __future__ import annotations

import os

import pytest

#: Set to 1 to let tests skip when Chromium, PostgreSQL or the Fashion-MNIST package cannot be installed here.
OPT_OUT = "HIR_ALLOW_MISSING_SERVICES"


def missing(what: str, how: str) -> None:
    """Fail (or, opted out, skip) the calling test: ``what`` is not available; ``how`` installs it."""
    message = f"{what} is not available: {how}"
    if os.environ.get(OPT_OUT) == "1":
        pytest.skip(f"{message} ({OPT_OUT}=1)")
    pytest.fail(f"{message}, or set {OPT_OUT}=1 to skip the tests that need it", pytrace=False)
