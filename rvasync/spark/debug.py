"""Debug lines of the Spark source, off unless ``RVASYNC_SPARK_DEBUG`` is set.

PySpark's plan shows little of a Python data source (its read schema and
the filters it took), and the source runs in Spark's Python workers, whose
output goes to the Spark driver's and executors' logs. Setting
``RVASYNC_SPARK_DEBUG=1`` in their environment (the driver program's
environment for local mode and the driver's workers;
``spark.executorEnv.RVASYNC_SPARK_DEBUG`` for executors) makes the source
write one line per planned read: the paths, columns, fields, modes and
options it uses, the filters it pushed and the partitions it made.
"""

from __future__ import annotations

import os
from typing import Any

from rvasync._logging import stderr_logger

__all__ = ["debug_enabled", "debug_log"]


def debug_enabled() -> bool:
    return os.environ.get("RVASYNC_SPARK_DEBUG", "") not in ("", "0")


def debug_log(event: str, **values: Any) -> None:
    if debug_enabled():
        stderr_logger().info(event, **values)
