"""One Spark session for the whole test run (``spark`` fixture): starting a JVM costs
seconds, so every test that needs Spark shares this one. ``local[2]`` (the machine's
cores), no UI, small shuffles, the Python workers on this interpreter, filter pushdown
on for Python data sources, and the ``tiercel`` format registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tiercel.tiered.spark import TiercelDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tiercel-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TiercelDataSource)
    yield session
    session.stop()
