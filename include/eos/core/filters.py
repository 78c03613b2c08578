"""The event ``filter``: a Spark SQL boolean expression over the declared fields.

Checked when the config loads (it parses, it only names declared fields) with sqlglot, so a typo
fails before anything is planned, without starting a JVM. Spark evaluates it in ``precommit``;
the audit evaluates the same expression with DuckDB, translated by sqlglot: two engines agreeing
is the check.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError


@lru_cache(maxsize=64)
def _expression(text: str) -> exp.Expression:
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except SqlglotError as error:
        raise ValueError(f"filter {text!r} is not a Spark SQL expression: "
                         f"{str(error).splitlines()[0]}") from None
    if isinstance(tree, exp.Query | exp.Command) or tree.find(exp.Subquery, exp.AggFunc):
        raise ValueError(f"filter {text!r} must be a row predicate (no queries or aggregates)")
    return tree


def filter_columns(text: str) -> list[str]:
    """The columns a filter reads; raises ``ValueError`` naming the problem if it does not parse."""
    return sorted({column.name for column in _expression(text).find_all(exp.Column)})


def filter_for_duckdb(text: str) -> str:
    """The filter in DuckDB's dialect, for the audit's independent evaluation."""
    return _expression(text).sql(dialect="duckdb")
