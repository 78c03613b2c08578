"""The list of Spark SQL settings the pinned Spark defines, read from its JVM: what ``eos
validate`` checks a pipeline's ``spark.conf`` keys against (``eos.core.config.spark_settings``)
without starting Spark.

Spark accepts any ``spark.sql.*`` key and ignores one it does not know, so a typo in a setting
that was meant to tune or fix an epoch is silent. The registry of every SQL setting (public and
internal, static ones included) lives in the JVM's ``SQLConf`` object; it is read once here, by
``python -m eos.compute.spark_settings``, and shipped as a text file with the package. A test
reads it again and compares, so the list follows the pinned Spark.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyspark

from eos.core.config.spark_settings import SQL_SETTINGS_FILE, header

# Objects whose initialisation registers SQL settings besides SQLConf's own.
_REGISTERING = ("org.apache.spark.sql.internal.SQLConf$",
                "org.apache.spark.sql.internal.StaticSQLConf$",
                "org.apache.spark.sql.hive.HiveUtils$")


def defined_sql_settings(spark: Any) -> list[str]:
    """Every ``spark.sql.*`` key the session's JVM defines, deprecated ones included (Spark
    still honours them, with a warning). ``spark`` is a classic (py4j) session."""
    jvm = spark._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    for name in _REGISTERING:
        try:
            jvm.java.lang.Class.forName(name, True, loader)
        except Exception:  # a module this Spark does not ship registers nothing
            continue
    sql_conf = jvm.java.lang.Class.forName("org.apache.spark.sql.internal.SQLConf$")
    registry = sql_conf.getDeclaredField("sqlConfEntries")
    registry.setAccessible(True)
    keys = {str(k) for k in registry.get(None).keySet().toArray()}
    module = sql_conf.getField("MODULE$").get(None)
    deprecated = module.deprecatedSQLConfigs().keys().iterator()
    while deprecated.hasNext():
        keys.add(str(deprecated.next()))
    return sorted(k for k in keys if k.startswith("spark.sql."))


def render(keys: list[str]) -> str:
    """The shipped file's text: a header naming the Spark it was read from, a key a line."""
    return header(pyspark.__version__) + "".join(f"{k}\n" for k in keys)


def main() -> int:
    """Regenerate the shipped list from a local classic session of the installed PySpark."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        text = render(defined_sql_settings(spark))
    finally:
        spark.stop()
    Path(SQL_SETTINGS_FILE).write_text(text)
    print(f"wrote {SQL_SETTINGS_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
