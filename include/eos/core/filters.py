"""The event ``filter`` and a stateless pipeline's ``select``: Spark SQL expressions over the
declared fields and the Kafka metadata (``eos.core.metadata``).

Checked when the config loads (it parses, it only names declared fields or metadata, it is a
pure function of the record; a ``select`` column has a type) with sqlglot, so a typo fails
before anything is planned, without starting a JVM. Spark evaluates them in ``precommit``; the
audit evaluates the same expressions with DuckDB, translated by sqlglot: two engines agreeing
is the check.

Why purity is checked: precommit must be a function of the plan. A retry, a zombie of an earlier
attempt and a replay after a rewind all recompute epoch N and must stage the same rows; a filter
calling ``rand()`` or ``current_timestamp()`` stages different rows each time, and one calling
``reflect`` runs Java code on the shared Spark Connect server. So the expression may use only
node types and functions on an **allow-list** (``ALLOWED``) of deterministic, side-effect-free
ones. An allow-list, not a deny list: a function nobody thought of (a UDF, a new Spark function,
one sqlglot does not know and parses as ``exp.Anonymous``) is refused until someone vouches for
it, instead of being accepted until someone notices. The names in ``_WHY`` only make the message
say why a well-known offender is refused.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError


def _classes(*names: str) -> frozenset[type[exp.Expression]]:
    """sqlglot's expression classes by name; a name this sqlglot lacks is left out, so a version
    that renames a class shrinks the allow-list (a refusal) instead of failing the import."""
    found = (getattr(exp, name, None) for name in names)
    return frozenset(cls for cls in found if isinstance(cls, type))


# Operators, literals and the other nodes a row predicate is made of.
_SYNTAX = _classes(
    "Column", "Identifier", "Literal", "Boolean", "Null", "Paren", "Neg", "Not", "And", "Or",
    "Xor", "EQ", "NEQ", "NullSafeEQ", "NullSafeNEQ", "GT", "GTE", "LT", "LTE", "Add", "Sub",
    "Mul", "Div", "IntDiv", "Mod", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "BitwiseLeftShift", "BitwiseRightShift", "DPipe", "Like", "ILike", "RegexpLike",
    "RegexpILike", "Escape", "In", "Between", "Is", "DataType", "DataTypeParam", "Interval",
    "Var")
# Deterministic scalar functions: the same arguments give the same answer, with no effect. The
# date and time ones read the session time zone, which precommit pins (``SESSION_CONF``).
_FUNCTIONS = _classes(
    "Cast", "TryCast", "If", "Case", "Coalesce", "Nullif", "Nvl2", "Greatest", "Least",
    "EqualNull", "IsNan", "Abs", "Ceil", "Floor", "Round", "Sqrt", "Cbrt", "Exp", "Ln", "Log",
    "Pow", "Sign", "Pi", "Degrees", "Radians", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
    "Atan2", "Factorial", "WidthBucket", "SafeAdd", "Lower", "Upper", "Length", "BitLength",
    "Substring", "Trim", "Concat", "ConcatWs", "StrPosition", "StartsWith", "EndsWith",
    "Contains", "Left", "Right", "Pad", "Replace", "RegexpReplace", "RegexpExtract", "Initcap",
    "Reverse", "Repeat", "Translate", "Ascii", "Chr", "Soundex", "Levenshtein", "MD5", "SHA",
    "SHA2", "Hex", "Unhex", "ToBase64", "FromBase64", "Year", "Month", "Day", "DayOfMonth",
    "DayOfWeek", "DayOfYear", "WeekOfYear", "Quarter", "Hour", "Minute", "Second",
    "TsOrDsToDate", "StrToTime", "StrToDate", "StrToUnix", "UnixToStr", "UnixToTime",
    "TimeToStr", "TimeStrToTime", "TsOrDsAdd", "DateAdd", "DateSub", "DateDiff", "AddMonths",
    "MonthsBetween", "LastDay", "DateTrunc", "TimestampTrunc", "UnixMillis", "UnixSeconds")
ALLOWED = _SYNTAX | _FUNCTIONS

_RANDOM = "returns a different value on every call"
_CLOCK = "reads the clock"
_PLACE = "depends on where or by whom the query runs"
_JAVA = "calls Java code on the shared Spark server"
_HALTS = "fails the query instead of answering: a filter must decide every row"
# Why well-known functions are refused (the allow-list decides; this only explains).
_WHY = {
    **dict.fromkeys(("rand", "random", "randn", "uuid", "shuffle", "uniform", "randstr"),
                    _RANDOM),
    **dict.fromkeys(("current_timestamp", "now", "current_date", "curdate", "current_time",
                     "localtimestamp", "current_timezone", "unix_timestamp", "sysdate",
                     "getdate", "systimestamp", "current_datetime"), _CLOCK),
    **dict.fromkeys(("monotonically_increasing_id", "spark_partition_id", "input_file_name",
                     "input_file_block_start", "input_file_block_length", "current_user",
                     "user", "session_user", "current_catalog", "current_database",
                     "current_schema", "version"), _PLACE),
    **dict.fromkeys(("reflect", "java_method", "try_reflect"), _JAVA),
    **dict.fromkeys(("assert_true", "raise_error"), _HALTS),
}
# Strings Spark reads as "the current time" when they become a date or timestamp (a typed
# literal, a cast of a constant, an implicit cast in a comparison): 'now', 'today Europe/Paris'.
_SPECIAL_DATETIMES = ("now", "today", "yesterday", "tomorrow")


# Spark functions sqlglot does not know (it parses them as ``exp.Anonymous``), vouched for here:
# a number of seconds, milliseconds or microseconds since 1970 as a timestamp. Each becomes
# sqlglot's ``UnixToTime`` of its scale, which the allow-list has and DuckDB translates.
_UNIX_TO_TIME = {"timestamp_seconds": exp.UnixToTime.SECONDS,
                 "timestamp_millis": exp.UnixToTime.MILLIS,
                 "timestamp_micros": exp.UnixToTime.MICROS}


def _known(node: exp.Expression) -> exp.Expression:
    """``node`` with the vouched-for functions (``_UNIX_TO_TIME``) in sqlglot's terms."""
    if isinstance(node, exp.Anonymous) and len(node.expressions) == 1:
        scale = _UNIX_TO_TIME.get(str(node.name).lower())
        if scale is not None:
            return exp.UnixToTime(this=node.expressions[0], scale=scale)
    return node


@lru_cache(maxsize=256)
def _expression(text: str, what: str = "filter") -> exp.Expression:
    """``text`` parsed and checked; ``what`` names it in a message (``filter``, ``select
    'page'``)."""
    try:
        tree = sqlglot.parse_one(text, read="spark").transform(_known)
    except SqlglotError as error:
        raise ValueError(f"{what} {text!r} is not a Spark SQL expression: "
                         f"{str(error).splitlines()[0]}") from None
    if isinstance(tree, exp.Query | exp.Command) or tree.find(exp.Subquery, exp.AggFunc):
        raise ValueError(f"{what} {text!r} must be a row expression (no queries or "
                         "aggregates)")
    problems = _impurities(tree)
    if problems:
        raise ValueError(f"{what} {text!r} must be a pure function of the record (precommit "
                         f"recomputes it on every retry and replay): {'; '.join(problems)}")
    return tree


def _name(node: exp.Expression) -> str:
    """The function's name as Spark knows it (``rand`` for ``random()`` too)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.StrToUnix):
        return "unix_timestamp"  # unix_timestamp() without arguments is StrToUnix(now)
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return type(node).__name__.lower()


def _refusal(node: exp.Expression) -> str | None:
    """Why ``node`` may not be in a filter, or None when it may."""
    if isinstance(node, exp.StrToUnix) and isinstance(node.this, exp.CurrentTimestamp):
        return f"unix_timestamp() without arguments {_CLOCK}"
    if isinstance(node, exp.CurrentTimestamp) and isinstance(node.parent, exp.StrToUnix):
        return None  # reported once, as unix_timestamp()
    if isinstance(node, exp.Literal) and node.is_string:
        first = node.this.strip().split(" ", 1)[0].lower()
        if first in _SPECIAL_DATETIMES:
            return f"the string '{first}' is the current time to Spark as a date or timestamp"
        return None
    if type(node) in ALLOWED:
        return None
    if isinstance(node, exp.Window):
        return (f"{node.sql(dialect='spark')} is a window function: its answer depends on the "
                "other rows of the batch")
    name = _name(node)
    if name in _WHY:
        return f"{name}() {_WHY[name]}"
    if isinstance(node, exp.Anonymous):
        return (f"{name}() is a function eos cannot vouch for (a UDF, or one not known to be "
                "deterministic)")
    if isinstance(node, exp.Func):
        return f"{name}() is not on the allow-list of deterministic functions (filters.ALLOWED)"
    return f"{name} ({node.sql(dialect='spark')}) may not be used in a filter or select"


def _impurities(tree: exp.Expression) -> list[str]:
    """Every refusal in the expression, each once, in reading order; nothing inside a refused
    node is reported again (``row_number() over (...)`` is one problem, not four)."""
    found: list[str] = []
    refused: set[int] = set()

    def prune(node: exp.Expression) -> bool:
        return id(node) in refused

    for node in tree.walk(prune=prune):
        problem = _refusal(node)
        if problem:
            refused.add(id(node))
            if problem not in found:
                found.append(problem)
    return found


def _column_name(column: exp.Column) -> str:
    """A column as the config names it: ``page``, or qualified, ``key.user``,
    ``header.trace-id`` (``eos.core.metadata``)."""
    return ".".join(part for part in (column.text("catalog"), column.text("db"),
                                      column.text("table"), column.name) if part)


def filter_columns(text: str, what: str = "filter") -> list[str]:
    """The columns an expression reads (qualified ones as ``key.user``); raises ``ValueError``
    naming the problem if it does not parse or is not a pure function of the record."""
    return sorted({_column_name(c) for c in _expression(text, what).find_all(exp.Column)})


def _instants(node: exp.Expression) -> exp.Expression:
    """Spark's TIMESTAMP is an instant (TIMESTAMP_LTZ, read in the session's time zone, UTC):
    DuckDB's TIMESTAMPTZ, not its TIMESTAMP, which would drop a string's UTC offset."""
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.TIMESTAMP:
        return exp.DataType.build("TIMESTAMPTZ")
    return node


def _null_concat(tree: exp.Expression) -> exp.Expression:
    """Spark's ``CONCAT`` is null when any operand is; DuckDB's skips null operands (sqlglot
    writes it as DuckDB's ``CONCAT``), so each becomes ``||``, which is null with any of them
    (innermost first, so a nested one is rewritten too)."""
    for node in reversed(list(tree.find_all(exp.Concat))):
        if node.args.get("coalesce"):
            continue
        parts = node.expressions
        joined: exp.Expression = exp.Cast(this=parts[0], to=exp.DataType.build("TEXT"))
        for part in parts[1:]:
            joined = exp.DPipe(this=joined, expression=part)
        replaced = exp.Paren(this=joined)
        if node is tree:
            return replaced
        node.replace(replaced)
    return tree


def _for_duckdb(tree: exp.Expression) -> str:
    """An expression in DuckDB's dialect: run it in a connection whose ``TimeZone`` is UTC
    (``DUCKDB_TIME_ZONE``), as precommit's Spark session is."""
    return _null_concat(tree.copy().transform(_instants)).sql(dialect="duckdb")


# What the audit sets in DuckDB before evaluating a filter or select: Spark's session time zone.
DUCKDB_TIME_ZONE = "SET TimeZone = 'UTC'"


def filter_for_duckdb(text: str) -> str:
    """The expression in DuckDB's dialect, for the audit's independent evaluation."""
    return _for_duckdb(_expression(text))


# sqlglot's types, as the config's grammar names them (``eos.core.config.FieldType``).
_GRAMMAR = {**dict.fromkeys(("BIGINT", "INT", "SMALLINT", "TINYINT"), "long"),
            **dict.fromkeys(("DOUBLE", "FLOAT"), "double"),
            **dict.fromkeys(("VARCHAR", "TEXT", "CHAR", "NCHAR", "NVARCHAR"), "string"),
            **dict.fromkeys(("BINARY", "VARBINARY", "BLOB"), "binary"),
            "BOOLEAN": "boolean", "DATE": "date",
            **dict.fromkeys(("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ"), "timestamp")}


# Predicates: boolean whatever their operands (a comparison, a logical operator, a test).
_PREDICATES = (exp.Predicate, exp.Connector, exp.Not, exp.Is, exp.Boolean)


def expression_type(text: str, what: str, columns: dict[str, str]) -> str:
    """The type of a ``select`` expression over ``columns`` (name -> Spark SQL type), as the
    grammar writes it (``long``, ``decimal(38,9)``): the type its output column gets, in
    every sink, before any record is read. Only what cannot be mistaken decides it: a column's
    own type, an outermost ``CAST``, or a predicate's boolean. Anything else is refused, naming
    the ``CAST`` that would settle it: a type inferred without Spark may not be Spark's (sqlglot
    types ``concat(1, 'a')`` as a number), and a wrong one would cast every value to it."""
    tree = _expression(text, what)
    found: exp.DataType | None = None
    if isinstance(tree, exp.Cast | exp.TryCast):
        found = tree.to
    elif isinstance(tree, exp.Column) and _column_name(tree) in columns:
        found = exp.DataType.build(columns[_column_name(tree)], dialect="spark")
    elif isinstance(tree, _PREDICATES):
        found = exp.DataType.build("BOOLEAN")
    return _grammar_type(found, text, what)


def _grammar_type(found: exp.DataType | None, text: str, what: str) -> str:
    from eos.core.metadata import HEADERS_SQL

    name = found.this.name if found is not None else "UNKNOWN"
    if name in _GRAMMAR:
        return _GRAMMAR[name]
    if found is not None and found == exp.DataType.build(HEADERS_SQL, dialect="spark"):
        return "headers"
    if found is not None and name == "DECIMAL":
        params = [p.this.name for p in found.expressions]
        if len(params) == 2 and all(p.isdigit() for p in params):
            return f"decimal({params[0]},{params[1]})"
    shown = ("no type eos can tell without running it" if found is None or name == "UNKNOWN"
             else f"type {found.sql(dialect='spark')}")
    raise ValueError(f"{what} {text!r} has {shown}; write CAST(... AS type) with type one of "
                     "string, bigint, double, boolean, decimal(p,s), binary, date, timestamp (a "
                     "column alone, or a comparison, needs none)")


def expression_for_duckdb(text: str, sql_type: str) -> str:
    """A ``select`` expression in DuckDB's dialect, cast to its column's type (``sql_type``,
    Spark's name) as Spark's result is: the audit's reference value."""
    cast = exp.Cast(this=_expression(text).copy(),
                    to=exp.DataType.build(sql_type, dialect="spark"))
    return _for_duckdb(cast)
