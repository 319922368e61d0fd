"""One Spark session for the whole test run (``spark`` fixture): starting a JVM costs
seconds, so every test that needs Spark shares this one. ``local[2]`` (the machine's
cores), no UI, small shuffles, the Python workers on this interpreter, filter pushdown
on for Python data sources, and the ``tiercel`` format registered.

Spark's Python workers inherit the environment the JVM started with, so S3 credentials
cannot be given to them per test: the JVM starts with moto's fake ones (and no AWS
files or instance metadata), the only S3 the tests reach; the test process's own
environment is left as it was."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from support.tiered_s3 import AWS_ENV

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tiercel.tiered.spark import TiercelDataSource

    with pytest.MonkeyPatch.context() as env:
        for name, value in AWS_ENV.items():
            env.setenv(name, value)
        env.delenv("AWS_SESSION_TOKEN", raising=False)
        env.delenv("AWS_PROFILE", raising=False)
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
