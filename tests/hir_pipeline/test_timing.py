"""The one stage timer: seconds per stage, announcements, the context around each stage, failures."""

from __future__ import annotations

import contextlib
import time

import pytest

from hir_pipeline.timing import Stages


def test_stages_time_announce_and_wrap():
    said, entered = [], []

    @contextlib.contextmanager
    def around(name):
        entered.append(f"enter {name}")
        yield
        entered.append(f"exit {name}")

    stages = Stages(say=said.append, label="asset: ", around=around)
    with stages("sleep"):
        time.sleep(0.05)
        assert stages.elapsed("sleep") >= 0.05  # readable while the stage runs
    assert stages.run("add", lambda: 1 + 1) == 2
    assert list(stages.seconds) == ["sleep", "add"]
    assert 0.05 <= stages.seconds["sleep"] < 5 and stages.seconds["add"] < stages.seconds["sleep"]
    assert said[0] == "asset: sleep ..." and said[1].startswith("asset: sleep done in ")
    assert said[2:] == ["asset: add ...", said[3]] and said[3].startswith("asset: add done in ")
    assert entered == ["enter sleep", "exit sleep", "enter add", "exit add"]
    with stages("sleep"):  # a stage run twice adds up
        time.sleep(0.02)
    assert stages.seconds["sleep"] >= 0.07
    assert stages.elapsed("never") == 0.0


def test_failed_stage_is_not_recorded():
    stages = Stages()
    with pytest.raises(ZeroDivisionError):
        stages.run("boom", lambda: 1 / 0)
    assert stages.seconds == {}
