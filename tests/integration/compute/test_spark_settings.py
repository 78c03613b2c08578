"""The list of Spark SQL settings ``eos validate`` checks ``spark.conf`` against is the pinned
Spark's own: read again from a real Spark JVM and compared with the shipped file, so a Spark
upgrade that adds or removes settings fails here until the list is regenerated
(``python -m eos.compute.spark_settings``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from eos.core.config.spark_settings import SQL_SETTINGS_FILE

_READ = """
import sys
from pyspark.sql import SparkSession
from eos.compute.spark_settings import defined_sql_settings, render
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    sys.stdout.write(render(defined_sql_settings(spark)))
finally:
    spark.stop()
"""


# What makes pyspark build a Spark Connect session instead of a classic one: a Connect session
# made earlier in the test process sets them, and a child inherits them.
_CONNECT_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")


def test_the_shipped_list_is_the_pinned_sparks(tmp_path: Path) -> None:
    # A classic (JVM) session in a process of its own: the suite's Spark is a Connect server.
    env = {k: v for k, v in os.environ.items() if k not in _CONNECT_ENV}
    done = subprocess.run([sys.executable, "-c", _READ], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    read = done.stdout
    shipped = SQL_SETTINGS_FILE.read_text()
    assert read.splitlines()[0] == shipped.splitlines()[0], "another Spark: regenerate the list"
    added = sorted(set(read.splitlines()) - set(shipped.splitlines()))
    gone = sorted(set(shipped.splitlines()) - set(read.splitlines()))
    assert (added, gone) == ([], []), "regenerate with python -m eos.compute.spark_settings"
    assert len(read.splitlines()) > 500 and "spark.sql.ansi.enabled" in read
