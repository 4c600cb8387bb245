"""Write ``tests/durations.json`` (seconds per test file) from a pytest JUnit XML report.

The suite runs on two xdist workers, one file at a time each (``--dist loadfile``); ``tests/conftest.py`` hands
out the longest files first so that no 2-minute file starts last. Refresh the figures after adding or slowing
down tests: ``scripts/test.sh --junitxml=/tmp/junit.xml && .venv/bin/python scripts/update_test_durations.py
/tmp/junit.xml``.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def file_durations(junit_xml: str) -> dict[str, float]:
    """Seconds per test file (``tests/...py``), summed over its test cases."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").split("::")[0]
        parts = module.split(".")
        # classname is "tests.pkg.test_mod" or "tests.pkg.test_mod.TestClass"
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time", 0.0))
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    durations = {k: round(v, 1) for k, v in file_durations(sys.argv[1]).items()}
    OUT.write_text(json.dumps(durations, indent=1) + "\n")
    print(f"{OUT}: {len(durations)} files, {sum(durations.values()):.0f} s in all")
