"""Aggregate functions: ``output: function(field)`` in a pipeline's ``aggregations``.

The contract (``Aggregation``): a function keeps a *partial state* per (group, window) in one or
more state columns, and that state is mergeable: merging the states of any split of a window's
events gives the state of all of them. That is what lets a window stay open across epochs (its
state is staged with epoch N and merged into N+1) and makes any split of the same events into
epochs give the same result. ``final`` turns a state into the output value when the window is
emitted. Each function states its state and output types, derived from the field's type.

Spark evaluates ``partial`` over events and ``merge`` over states; the audit
(``eos.tools.audit.verify``)
recomputes every function on its own in plain Python and shares none of this. A function whose
state of one event is a row-level expression also implements ``Lifts`` (a capability apart, as
Flink's sink capabilities are): its events need no aggregation of their own before they merge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from importlib import import_module
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.core.config import FieldType, PipelineConfig


class _OnFirstUse:
    """A module imported when first used: ``eos.core.config`` checks aggregations while the DAG file
    is parsed, which must not import pyarrow (the dag processor re-parses constantly)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(import_module(self._name), attribute)


if not TYPE_CHECKING:
    pa = _OnFirstUse("pyarrow")


def arrow_type(ftype: FieldType) -> pa.DataType:
    from eos.core.schema import arrow_type as of_field

    return of_field(ftype)


def spark_ddl(dtype: pa.DataType) -> str:
    from eos.core.schema import spark_ddl as of_arrow

    return of_arrow(dtype)

HLL_LG_CONFIG_K = 12  # Spark's default: 4096 registers, relative standard error about 1.6%


def state_column(output: str, part: str) -> str:
    return f"s__{output}__{part}"


def output_column(output: str) -> str:
    return f"o__{output}"


def _sum_type(ftype: FieldType | None, exact_long: bool = False) -> pa.DataType:
    """A sum keeps the field's kind: decimal(p,s) widens to decimal(38,s) (exact), double stays
    double, long stays long. An exact sum that does not fit its type is null and flagged
    (``Aggregation.witness``), never an error that would fail every attempt of the epoch and
    never a wrapped value; a double sum follows IEEE 754 (±Infinity, NaN)."""
    assert ftype is not None
    if ftype.name == "decimal":
        return pa.decimal128(38, ftype.scale)
    if ftype.name == "long":
        return pa.decimal128(38, 0) if exact_long else pa.int64()
    return pa.float64()


def _exact(ftype: FieldType | None) -> bool:
    """Whether a sum of ``ftype`` is exact (long, decimal), so that it can overflow its type."""
    return ftype is not None and ftype.name in ("decimal", "long")


def _exact_merge(F: Any, sums: str, counts: str, dtype: pa.DataType) -> Any:
    """The sum of exact partial sums, null when it does not fit ``dtype`` or when any partial
    had already overflowed (its sum null while it counted values): an overflow is sticky, so
    a window that overflowed in one epoch never sums to a number in a later one."""
    total = F.try_sum(F.col(sums).cast(spark_ddl(dtype)))
    overflowed = F.max(F.when(F.col(sums).isNull() & (F.col(counts) > 0), F.lit(1))
                       .otherwise(F.lit(0))) > 0
    return F.when(~overflowed, total).cast(spark_ddl(dtype)).alias(sums)


class Aggregation(ABC):
    """One aggregation of a pipeline: ``output`` = ``function(field)``."""

    function: ClassVar[str]
    needs_number: ClassVar[bool] = False
    # The output is one of the aggregated values, of the field's type (min, max): a string
    # field's output is as long as its longest value (``eos.core.limits``).
    keeps_value: ClassVar[bool] = False

    def __init__(self, output: str, field: str | None, ftype: FieldType | None) -> None:
        self.output, self.field, self.ftype = output, field, ftype

    @property
    def field_type(self) -> FieldType:
        """The aggregated field's type (every function but ``count(*)`` has a field)."""
        if self.ftype is None:
            raise TypeError(f"aggregation '{self.output}' ({self.function}) has no field")
        return self.ftype

    @classmethod
    def refuses(cls, ftype: FieldType) -> str | None:
        """Why this function cannot take a field of ``ftype`` (None: it can)."""
        if cls.needs_number and not ftype.numeric:
            return f"{cls.function} needs a long, double or decimal field, not {ftype}"
        return None

    @abstractmethod
    def state(self) -> list[tuple[str, pa.DataType]]:
        """The state columns (full names) and their types."""

    @abstractmethod
    def output_type(self) -> pa.DataType:
        """The type of the output column."""

    @abstractmethod
    def partial(self, F: Any) -> list[Any]:
        """Spark aggregate expressions over events, one per state column, aliased to it."""

    @abstractmethod
    def merge(self, F: Any) -> list[Any]:
        """Spark aggregate expressions over state rows, one per state column, aliased to it."""

    @abstractmethod
    def final(self, F: Any) -> Any:
        """A Spark expression over one merged state row: the output value."""

    def witness(self) -> str | None:
        """The state column that tells, on an emitted window, that the output is null because
        the exact result did not fit its type (null output, witness > 0): the commit turns
        such a window into a quarantine row naming it (``eos.core.outputs``). None for a
        function whose result always fits."""
        return None

    def _col(self, part: str) -> str:
        return state_column(self.output, part)

    def _cast(self, F: Any, expr: Any, part: str, dtype: pa.DataType) -> Any:
        return expr.cast(spark_ddl(dtype)).alias(self._col(part))


class Lifts(ABC):
    """The capability to state one event's partial state as a row-level expression: the state
    of a window holding that event alone. ``merge`` over lifted events equals ``partial`` over
    the events, so an epoch whose every aggregation lifts merges its events and the open
    windows in one aggregation, one shuffle (``eos.compute.precommit``), instead of aggregating its
    events first and merging the result (two shuffles)."""

    @abstractmethod
    def lift(self, F: Any) -> list[Any]:
        """Spark expressions over one event, one per state column, aliased to it."""


def lifts_all(aggregations: list[Aggregation]) -> bool:
    """Whether every aggregation of a pipeline lifts (``Lifts``)."""
    return all(isinstance(a, Lifts) for a in aggregations)


def _present(F: Any, field: Any) -> Any:
    """1 when an event has ``field`` (a column; not null), else 0: one event's count of it."""
    return F.when(field.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("bigint")


class Count(Aggregation, Lifts):
    """``count(*)``: events in the window; ``count(field)``: events where the field is not null."""

    function = "count"

    def state(self) -> list[tuple[str, pa.DataType]]:
        return [(self._col("n"), pa.int64())]

    def output_type(self) -> pa.DataType:
        return pa.int64()

    def partial(self, F: Any) -> list[Any]:
        target = F.lit(1) if self.field is None else F.col(self.field)
        return [F.count(target).alias(self._col("n"))]

    def merge(self, F: Any) -> list[Any]:
        return [F.sum(self._col("n")).cast("bigint").alias(self._col("n"))]

    def lift(self, F: Any) -> list[Any]:
        one = F.lit(1).cast("bigint") if self.field is None else _present(F, F.col(self.field))
        return [one.alias(self._col("n"))]

    def final(self, F: Any) -> Any:
        return F.col(self._col("n"))


class Sum(Aggregation, Lifts):
    """Exact for long and decimal; a double sum is a double (its last bits depend on the order
    Spark adds in; past the double range it is ±Infinity). Null when no event had a value.

    An exact sum keeps the count of its values beside it: a sum that does not fit its type is
    null with a count above zero (``witness``), which no later epoch can turn into a number."""

    function = "sum"
    needs_number = True

    @property
    def exact(self) -> bool:
        return _exact(self.ftype)

    def state(self) -> list[tuple[str, pa.DataType]]:
        counted = [(self._col("n"), pa.int64())] if self.exact else []
        return [(self._col("sum"), _sum_type(self.ftype)), *counted]

    def output_type(self) -> pa.DataType:
        return _sum_type(self.ftype)

    def witness(self) -> str | None:
        return self._col("n") if self.exact else None

    def partial(self, F: Any) -> list[Any]:
        dtype = _sum_type(self.ftype)
        if not self.exact:
            return [self._cast(F, F.sum(self.field), "sum", dtype)]
        return [self._cast(F, F.try_sum(F.col(self.field).cast(spark_ddl(dtype))), "sum", dtype),
                F.count(self.field).alias(self._col("n"))]

    def merge(self, F: Any) -> list[Any]:
        dtype = _sum_type(self.ftype)
        if not self.exact:
            return [self._cast(F, F.sum(self._col("sum")), "sum", dtype)]
        return [_exact_merge(F, self._col("sum"), self._col("n"), dtype),
                F.sum(self._col("n")).cast("bigint").alias(self._col("n"))]

    def lift(self, F: Any) -> list[Any]:
        lifted = [self._cast(F, F.col(self.field), "sum", _sum_type(self.ftype))]
        if self.exact:
            lifted.append(_present(F, F.col(self.field)).alias(self._col("n")))
        return lifted

    def final(self, F: Any) -> Any:
        return F.col(self._col("sum"))


class _Extreme(Aggregation, Lifts):
    spark_name: ClassVar[str]
    keeps_value = True

    def state(self) -> list[tuple[str, pa.DataType]]:
        return [(self._col("v"), arrow_type(self.field_type))]

    def output_type(self) -> pa.DataType:
        return arrow_type(self.field_type)

    def partial(self, F: Any) -> list[Any]:
        return [getattr(F, self.spark_name)(self.field).alias(self._col("v"))]

    def merge(self, F: Any) -> list[Any]:
        return [getattr(F, self.spark_name)(self._col("v")).alias(self._col("v"))]

    def lift(self, F: Any) -> list[Any]:
        return [F.col(self.field).alias(self._col("v"))]

    def final(self, F: Any) -> Any:
        return F.col(self._col("v"))


class Min(_Extreme):
    """The smallest value (strings: by code point); the field's own type."""

    function = spark_name = "min"


class Max(_Extreme):
    """The largest value; the field's own type."""

    function = spark_name = "max"


class Avg(Aggregation, Lifts):
    """State: the exact sum (long sums as decimal(38,0)) and the count; output: their quotient
    as a double, null when no event had a value. A decimal sum that does not fit decimal(38,s)
    makes the average null, flagged like a sum's (``witness``); a double average past the
    double range is ±Infinity or NaN."""

    function = "avg"
    needs_number = True

    def state(self) -> list[tuple[str, pa.DataType]]:
        return [(self._col("sum"), _sum_type(self.ftype, exact_long=True)),
                (self._col("n"), pa.int64())]

    def output_type(self) -> pa.DataType:
        return pa.float64()

    def witness(self) -> str | None:
        return self._col("n") if _exact(self.ftype) else None

    def partial(self, F: Any) -> list[Any]:
        dtype = _sum_type(self.ftype, exact_long=True)
        add = F.try_sum if _exact(self.ftype) else F.sum
        return [self._cast(F, add(F.col(self.field).cast(spark_ddl(dtype))), "sum", dtype),
                F.count(self.field).alias(self._col("n"))]

    def merge(self, F: Any) -> list[Any]:
        dtype = _sum_type(self.ftype, exact_long=True)
        total = (_exact_merge(F, self._col("sum"), self._col("n"), dtype) if _exact(self.ftype)
                 else self._cast(F, F.sum(self._col("sum")), "sum", dtype))
        return [total, F.sum(self._col("n")).cast("bigint").alias(self._col("n"))]

    def lift(self, F: Any) -> list[Any]:
        dtype = _sum_type(self.ftype, exact_long=True)
        field = F.col(self.field)
        return [self._cast(F, field, "sum", dtype),
                _present(F, field).alias(self._col("n"))]

    def final(self, F: Any) -> Any:
        n = F.col(self._col("n"))
        return F.when(n > 0, F.col(self._col("sum")).cast("double") / n.cast("double"))


class CountDistinct(Aggregation):
    """Exact: the state is the sorted set of distinct non-null values, so it merges by union.
    Its size grows with the distinct values per window (approx_count_distinct does not)."""

    function = "count_distinct"

    def state(self) -> list[tuple[str, pa.DataType]]:
        return [(self._col("set"), pa.list_(arrow_type(self.field_type)))]

    def output_type(self) -> pa.DataType:
        return pa.int64()

    def partial(self, F: Any) -> list[Any]:
        return [F.array_sort(F.collect_set(self.field)).alias(self._col("set"))]

    def merge(self, F: Any) -> list[Any]:
        union = F.array_distinct(F.flatten(F.collect_list(self._col("set"))))
        return [F.array_sort(union).alias(self._col("set"))]

    def final(self, F: Any) -> Any:
        return F.size(self._col("set")).cast("bigint")


class ApproxCountDistinct(Aggregation):
    """A mergeable HyperLogLog sketch (Apache DataSketches, through Spark's ``hll_sketch_agg`` /
    ``hll_union_agg``), lgConfigK 12: relative standard error about 1.6%, exact for small
    counts. Values that are not strings or longs are sketched as their string form."""

    function = "approx_count_distinct"

    def state(self) -> list[tuple[str, pa.DataType]]:
        return [(self._col("hll"), pa.binary())]

    def output_type(self) -> pa.DataType:
        return pa.int64()

    def partial(self, F: Any) -> list[Any]:
        value = F.col(self.field)
        if self.ftype is not None and self.ftype.name not in ("string", "long"):
            value = value.cast("string")
        return [F.hll_sketch_agg(value, HLL_LG_CONFIG_K).alias(self._col("hll"))]

    def merge(self, F: Any) -> list[Any]:
        return [F.hll_union_agg(self._col("hll")).alias(self._col("hll"))]

    def final(self, F: Any) -> Any:
        return F.hll_sketch_estimate(self._col("hll"))


FUNCTIONS: dict[str, type[Aggregation]] = {
    cls.function: cls
    for cls in (Count, Sum, Min, Max, Avg, CountDistinct, ApproxCountDistinct)
}


def aggregations_for(config: PipelineConfig) -> list[Aggregation]:
    """The pipeline's aggregations in declared order, bound to their fields' types."""
    types = config.field_types
    return [
        FUNCTIONS[spec.function](output, spec.field, types[spec.field] if spec.field else None)
        for output, spec in config.aggregations.items()
    ]
