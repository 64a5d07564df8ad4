"""The SparkSession tidelog's jobs run in: local mode on loopback, no UI, tidelog's data source
registered. On a real Spark cluster (spark-submit), the jobs take the session they are given;
``register`` adds the data source to it."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def register(spark: SparkSession) -> SparkSession:
    """Makes ``format("tidelog")`` known to ``spark`` (read and readStream)."""
    from tidelog.pipeline.source import TidelogDataSource

    spark.dataSource.register(TidelogDataSource)
    return spark


def local_session(cores: int = 2, app_name: str = "tidelog") -> SparkSession:
    """A local-mode session on ``cores`` cores (or the one already running in this process).

    Spark binds 127.0.0.1 only; Python workers run this interpreter, so they import tidelog;
    Python data sources get the filters pushed down; times are shown in UTC. The driver (which
    is the executor in local mode) gets TIDELOG_SPARK_MEMORY, 2g by default.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.memory", os.environ.get("TIDELOG_SPARK_MEMORY", "2g"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(max(2, cores * 2)))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return register(spark)
