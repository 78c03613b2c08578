"""The classic (in-process JVM) Spark session: the submit app's, and tools' that want no server."""

from __future__ import annotations

import os
import sys
from typing import Any

from eos.compute.connect import SESSION_CONF
from eos.compute.reader import KafkaRangeDataSource
from eos.core.config import PipelineConfig


def local_session(config: PipelineConfig) -> Any:
    """A classic (in-process JVM) session: the submit app's, and tools' that want no server.
    Under spark-submit, submit's own settings take precedence."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(f"eos-precommit-{config.name}")
        .master(os.environ.get("EOS_SPARK_MASTER", config.spark.master))
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # pyspark records the Python call site of every Column call for error messages; with
        # IPython absent it retries that import each time: ~0.1 s of plan building per epoch.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    for key, value in {**SESSION_CONF, **config.spark.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KafkaRangeDataSource)
    return spark
