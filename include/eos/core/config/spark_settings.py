"""A pipeline's ``spark.conf`` checked when it loads: a key Spark would ignore (not ``spark.*``,
or a ``spark.sql.*`` key the pinned Spark does not define) and a setting that changes what an
epoch computes are refused, naming the key.

Precommit must be a function of the plan and the previous epoch's state, and ``eos verify``
recomputes every committed output with the same rules. A setting such as ANSI mode or the
session time zone changes results (an overflow that fails becomes a wrapped number, a date
shifts by the zone), so the outputs would follow a rule the audit does not, and would change
under a pipeline's committed epochs when the setting changed. eos sets the few of these it
needs itself.

The list of defined SQL settings is read from the pinned Spark's JVM by
``python -m eos.compute.spark_settings`` and shipped beside this module.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path

SQL_SETTINGS_FILE = Path(__file__).with_name("spark_sql_settings.txt")
_HEADER = "# The spark.sql.* settings Spark {version} defines"

# Settings whose value changes what an epoch's rows are, each with why. Keys under a prefix in
# ``RESULT_CHANGING_PREFIXES`` are refused the same way.
RESULT_CHANGING: dict[str, str] = {
    "spark.sql.ansi.enabled": "eos runs every epoch with ANSI mode on: an overflow or a bad "
                              "cast fails or is quarantined instead of becoming a wrong value",
    "spark.sql.session.timeZone": "eos computes event times and windows in UTC",
    "spark.sql.storeAssignmentPolicy": "it decides whether a value that does not fit a column "
                                       "is refused or silently changed",
    "spark.sql.caseSensitive": "it changes which column a name resolves to",
    "spark.sql.decimalOperations.allowPrecisionLoss": "it changes decimal results' scale",
    "spark.sql.timestampType": "it changes the type of every timestamp expression",
    "spark.sql.mapKeyDedupPolicy": "it changes which value a repeated map key keeps",
    "spark.sql.jsonGenerator.ignoreNullFields": "it changes the JSON a Kafka or files sink "
                                                "writes",
    "spark.sql.parquet.outputTimestampType": "it changes how staged times are stored",
    "spark.sql.parquet.writeLegacyFormat": "it changes how staged decimals are stored",
    "spark.sql.charAsVarchar": "it changes string comparison and padding",
    "spark.sql.readSideCharPadding": "it changes string comparison and padding",
    "spark.sql.datetime.java8API.enabled": "it changes the types dates and times reach Python "
                                           "as",
}
RESULT_CHANGING_PREFIXES: dict[str, str] = {
    "spark.sql.legacy.": "legacy behaviours change results by design",
    "spark.sql.ansi.": "the ANSI settings change what an expression means",
}

# SQL settings whose keys hold a name the user chooses (a catalog and its options).
NAMED_BY_USER = ("spark.sql.catalog.",)


def header(version: str) -> str:
    """The shipped list's first line, naming the Spark it was read from."""
    return _HEADER.format(version=version) + " (python -m eos.compute.spark_settings).\n"


@cache
def defined_sql_settings() -> frozenset[str]:
    """The ``spark.sql.*`` keys of the pinned Spark (the shipped list)."""
    lines = SQL_SETTINGS_FILE.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def check_spark_conf(conf: dict[str, str]) -> None:
    """``ValueError`` naming the first key of ``spark.conf`` Spark would ignore or that would
    change results."""
    for key in conf:
        problem = _problem(key)
        if problem:
            raise ValueError(f"spark.conf {key}: {problem}")


def _problem(key: str) -> str | None:
    why = RESULT_CHANGING.get(key) or next(
        (reason for prefix, reason in RESULT_CHANGING_PREFIXES.items()
         if key.startswith(prefix)), None)
    if why is not None:
        return (f"changes what an epoch computes ({why}), and the audit recomputes epochs "
                "without it: remove it")
    if not key.startswith("spark."):
        return "not a Spark setting (Spark ignores keys that do not start with spark.)"
    if key.startswith("spark.sql.") and key not in defined_sql_settings() \
            and not key.startswith(NAMED_BY_USER):
        close = difflib.get_close_matches(key, sorted(defined_sql_settings()), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"Spark defines no such SQL setting, and would ignore it{hint}"
    return None
