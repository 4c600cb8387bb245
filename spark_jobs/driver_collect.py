"""Collecting a frame to the driver, with a clear error when it is larger than ``spark.driver.maxResultSize``.

The graph stages and the model inputs collect whole tables to the driver through Arrow (README, Memory model, gives
their size per node and edge). Spark's own error when a collect outgrows ``spark.driver.maxResultSize`` (1g by
default) is a long Java stack trace that names neither the table nor the fix; :func:`to_arrow` turns it into
:class:`DriverResultTooLarge`, one line naming what was being collected, the sizes and the settings to raise.
"""

from __future__ import annotations

import re

import pyarrow as pa
from pyspark.sql import DataFrame

_SIZES = re.compile(r"serialized results of \d+ tasks \(([^)]*)\) is bigger than spark\.driver\.maxResultSize "
                    r"\(([^)]*)\)")


class DriverResultTooLarge(RuntimeError):
    """A frame collected to the driver is larger than ``spark.driver.maxResultSize`` allows."""


def to_arrow(frame: DataFrame, what: str) -> pa.Table:
    """``frame.toArrow()``; a result over ``spark.driver.maxResultSize`` raises :class:`DriverResultTooLarge`.

    Args:
        frame: the rows to collect.
        what: what they are, for the message (e.g. ``"graph_views rows"``).
    """
    try:
        return frame.toArrow()
    except Exception as exc:
        text = str(exc)
        if "spark.driver.maxResultSize" not in text:
            raise
        found = _SIZES.search(text)
        sizes = f" ({found.group(1)} collected so far, limit {found.group(2)})" if found else ""
        raise DriverResultTooLarge(
            f"collecting {what} to the driver exceeds spark.driver.maxResultSize{sizes}: raise it, and "
            "spark.driver.memory with it, in the spark resource's conf, e.g. {'spark.driver.maxResultSize': '4g', "
            "'spark.driver.memory': '8g'} (README, Memory model: the size per node and edge)"
        ) from exc
