"""A missing prerequisite fails its test unless the run opted out (then it skips, saying why)."""

from __future__ import annotations

import pytest

from tests.prerequisites import OPT_OUT, missing


def test_missing_prerequisite_fails_unless_opted_out(monkeypatch):
    monkeypatch.delenv(OPT_OUT, raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"^chromium is not available: apt-get install chromium, or set "):
        missing("chromium", "apt-get install chromium")
    monkeypatch.setenv(OPT_OUT, "1")
    with pytest.raises(pytest.skip.Exception, match=r"chromium is not available: .*\(HIR_ALLOW_MISSING_SERVICES=1\)"):
        missing("chromium", "apt-get install chromium")
