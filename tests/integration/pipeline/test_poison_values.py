"""Poison values (docs/guarantees.md): an aggregate that overflows its type or is not finite never
halts a pipeline and is never silently wrong.

Real broker, real Spark, real Delta, a Kafka (JSON) sink. One window holds the poison (two
doubles of 1.5e308, two 29-digit decimals in the shipped ``decimal(38,9)``, two longs near
2^63), another window of another key in the same epoch holds ordinary values. After the epochs
the pipeline has caught up, the ordinary window is in every sink, the poisoned window is what
docs/pipelines.md says (doubles: IEEE-754 infinities, in JSON as the strings Spark
writes; exact sums that do not fit: null, with a quarantine row naming the window, key and
aggregation), and the independent audit agrees.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos.compute.epochs import run_until_caught_up
from eos.core.delta import read_table
from eos.core.kafka import client_settings, topic_watermarks
from eos.core.outputs import windows_schema
from eos.core.protocol import checkpointed_epoch
from eos.core.sink import sinks_for
from eos.sinks.records import decode_value
from eos.tools.audit.verify import audit
from eos.tools.pipelines import unique_topic

from support.harness import delta_path
from support.pipelines import kafka_sinks, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = 1767225600000
BIG_DECIMAL = "61234567890123456789012345678.5"  # 29 integer digits: two exceed decimal(38,9)
BIG_LONG = 2**62 + 12345  # two of them exceed 2^63 - 1
EVENT = {"time": {"field": "ts", "format": "epoch_ms"},
         "fields": {"k": "string", "d": "double", "m": "decimal(38,9)", "l": "long"}}
AGGREGATIONS = {"n": "count(*)", "d_sum": "sum(d)", "d_avg": "avg(d)", "d_max": "max(d)",
                "m_sum": "sum(m)", "m_avg": "avg(m)", "l_sum": "sum(l)", "l_avg": "avg(l)"}


def _record(i: int, key: str, d: float, m: str, l_: int) -> bytes:
    """Decimals as exact JSON numbers (the declared type reads numbers, not strings)."""
    return (f'{{"ts": {T0 + i}, "k": "{key}", "d": {d!r}, "m": {m}, "l": {l_}}}').encode()


def produce_poison(topic: str) -> int:
    records = [
        _record(0, "poison", 1.5e308, BIG_DECIMAL, BIG_LONG),
        _record(1, "plain", 1.5, "2.25", 7),
        _record(2, "poison", 1.5e308, BIG_DECIMAL, BIG_LONG),
        _record(3, "plain", 2.5, "0.75", 3),
        # negatives that overflow the other way, in a window of their own
        _record(2000, "negative", -1.5e308, "-" + BIG_DECIMAL, -BIG_LONG),
        _record(2001, "negative", -1.5e308, "-" + BIG_DECIMAL, -BIG_LONG - 10),
    ]
    producer = ck.Producer(client_settings())
    for i, record in enumerate(records):
        producer.produce(topic, value=record, timestamp=T0 + i, partition=0)
    assert producer.flush(30) == 0
    return len(records)


def read_json_sink(topic: str, schema: Any) -> list[dict[str, Any]]:
    consumer = ck.Consumer({**client_settings(), "group.id": unique_topic("g"),
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    marks = topic_watermarks(client_settings(), topic)
    consumer.assign([ck.TopicPartition(topic, p, low) for p, (low, _) in marks.items()])
    left = sum(high - low for low, high in marks.values())
    rows = []
    while left:
        message = consumer.poll(10)
        assert message is not None, "the sink's records must be readable"
        left -= 1
        if message.error() is None and message.value() is not None:
            rows.append(decode_value(message.value(), schema))
    consumer.close()
    return rows


def test_poison_values_neither_halt_nor_lie(tmp_path: Path, kafka: str, spark: Any) -> None:
    topic = unique_topic("poison")
    produced = produce_poison(topic)
    config = make_pipeline(tmp_path, base=kafka_sinks(), kafka={"topic": topic}, event=EVENT,
                           group_by=["k"],
        window={"type": "tumbling", "size": "1s", "idle_timeout": "0ms"},
        aggregations=AGGREGATIONS, epoch={"max_records": 4})
    runs = run_until_caught_up(config, "poison", spark=spark, limit=6)
    assert runs[-1].plan.records == 0 and checkpointed_epoch(config) == runs[-1].plan.epoch

    windows = {row["k"]: row for row in read_table(delta_path(config, "target")).to_pylist()}
    assert windows.keys() == {"poison", "plain", "negative"}
    plain = windows["plain"]
    assert (plain["n"], plain["d_sum"], plain["m_sum"], plain["l_sum"]) == (
        2, 4.0, Decimal("3.000000000"), 10)
    poison, negative = windows["poison"], windows["negative"]
    assert poison["n"] == 2 and negative["n"] == 2
    assert poison["d_sum"] == math.inf and poison["d_avg"] == math.inf
    assert negative["d_sum"] == -math.inf and poison["d_max"] == 1.5e308
    for row in (poison, negative):  # exact sums that do not fit their type: null, flagged
        assert row["m_sum"] is None and row["l_sum"] is None and row["m_avg"] is None
    # An average of longs sums in decimal(38,0): it fits where the long sum did not.
    assert poison["l_avg"] == pytest.approx(float(BIG_LONG))
    assert negative["l_avg"] == pytest.approx(-float(BIG_LONG + 5))

    flagged = [row for row in read_table(delta_path(config, "quarantine")).to_pylist()
               if row["reason"].startswith("overflow")]
    named = {(json.loads(row["raw_key"])["k"], row["reason"].split(" ")[1]) for row in flagged}
    assert named == {("poison", "m_sum"), ("poison", "l_sum"), ("poison", "m_avg"),
                     ("negative", "m_sum"), ("negative", "l_sum"), ("negative", "m_avg")}
    assert all(row["partition"] is None and row["offset"] is None for row in flagged)

    kafka_sink = next(s for s in sinks_for(config) if s.kind == "kafka")
    published = {row["k"]: row for row in read_json_sink(kafka_sink.options.topic,
                                                         windows_schema(config))}
    assert published["poison"]["d_sum"] == math.inf
    assert published["negative"]["d_sum"] == -math.inf
    assert published["poison"]["m_sum"] is None and published["plain"]["l_sum"] == 10

    report = audit(config)
    assert report.ok, report.render()
    assert report.records == produced


# -- a property: aggregations x declared types x extreme values ---------------------------------

LONGS = st.one_of(st.sampled_from([2**63 - 1, 2**62 + 1, 1, 0]),
                  st.integers(min_value=0, max_value=2**63 - 1))
LARGEST_DECIMAL = Decimal("99999999999999999999999999999.999999999")  # decimal(38,9)
DECIMALS = st.one_of(st.sampled_from([LARGEST_DECIMAL, Decimal("0.000000001"), Decimal(0)]),
                     st.decimals(min_value=0, max_value=LARGEST_DECIMAL, places=9,
                                 allow_nan=False, allow_infinity=False))
# Huge doubles past which a sum overflows, subnormals, and ordinary values small enough that
# the order of additions cannot move a sum across the overflow threshold.
DOUBLES = st.one_of(st.sampled_from([1.5e308, 1.7976931348623157e308, 5e-324,
                                     2.2250738585072014e-308, 0.0]),
                    st.floats(min_value=-1e280, max_value=1e280, allow_nan=False))
RECORD = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), LONGS, DECIMALS, DOUBLES)
PROPERTY_AGGREGATIONS = {
    "n": "count(*)", **{f"{f}_{fn}": f"{fn}({f})" for f in ("l", "m", "d")
                         for fn in ("sum", "avg", "min", "max")}}


def _property_record(i: int, key: str, window: int, l_: int, m: Decimal, d: float,
                     sign: int) -> bytes:
    """One sign per example for the exact and huge values: a sum whose running total could
    leave the range in one order and not in another is order-dependent (docs/pipelines.md)."""
    return (f'{{"ts": {T0 + window * 1000 + i}, "k": "{key}", "l": {sign * l_}, '
            f'"m": {format(sign * m, "f")}, "d": {sign * d!r}}}').encode()


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(records=st.lists(RECORD, min_size=1, max_size=8), negative=st.booleans())
def test_extreme_values_never_halt_and_equal_the_reference(
        tmp_path_factory: pytest.TempPathFactory, kafka: str, spark: Any,
        records: list[tuple[str, int, int, Decimal, float]], negative: bool) -> None:
    """Precommit and commit never raise (a permanent or a repeating error would stop
    ``run_until_caught_up``), and every committed value is the plain-Python reference's or
    null with its quarantine row (the audit checks both, and every sink)."""
    topic = unique_topic("extreme")
    producer = ck.Producer(client_settings())
    for i, (key, window, l_, m, d) in enumerate(records):
        producer.produce(topic, partition=0, timestamp=T0 + i,
                         value=_property_record(i, key, window, l_, m, d, -1 if negative else 1))
    assert producer.flush(30) == 0
    config = make_pipeline(tmp_path_factory.mktemp("extreme"), base=kafka_sinks(),
                           kafka={"topic": topic},
        event={"time": {"field": "ts", "format": "epoch_ms"},
               "fields": {"k": "string", "l": "long", "m": "decimal(38,9)", "d": "double"}},
        group_by=["k"], window={"type": "tumbling", "size": "1s", "idle_timeout": "0ms"},
        aggregations=PROPERTY_AGGREGATIONS, epoch={"max_records": 3})
    run_until_caught_up(config, "extreme", spark=spark, limit=6)
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == len(records)


def test_every_sink_checks_hostile_rows_before_the_seal(tmp_path: Path, kafka: str) -> None:
    """Each sink type's ``check`` on hostile staged rows: non-finite doubles and nulls are
    taken (Delta holds them, JSON writes them as strings); a record over the Kafka producer's
    limit is refused before the seal, naming the limit; a Delta table of another schema too."""
    from deltalake import write_deltalake

    from eos.core.errors import SinkCannotTake

    config = make_pipeline(tmp_path, base=kafka_sinks(), kafka={"topic": unique_topic("never")},
                                 event=EVENT, group_by=["k"],
                                 window={"type": "tumbling", "size": "1s"},
                                 aggregations=AGGREGATIONS)
    schema = windows_schema(config)
    hostile = {"k": "x", "window_start": 0, "window_end": 1000, "n": 2, "d_sum": math.inf,
               "d_avg": math.nan, "d_max": -math.inf, "m_sum": None, "m_avg": None,
               "l_sum": None, "l_avg": 5e-324, "epoch": 0}
    rows = pa.Table.from_pylist([hostile], schema=schema)
    kafka_sink, delta_sink = [s for s in sinks_for(config) if s.output == "windows"]
    kafka_sink.check(0, rows)
    delta_sink.prepare(schema)
    delta_sink.check(0, rows)
    assert delta_sink.commit(0, rows, "h").rows == 1
    (back,) = read_table(delta_sink.path).to_pylist()
    assert back["d_sum"] == math.inf and math.isnan(back["d_avg"]) and back["m_sum"] is None

    huge = pa.Table.from_pylist([{**hostile, "k": "x" * 1_100_000}], schema=schema)
    with pytest.raises(SinkCannotTake, match=r"1 records exceed the producer's "
                                             r"message.max.bytes \(1000000"):
        kafka_sink.check(1, huge)
    write_deltalake(delta_sink.path, pa.table({"n": ["two"]}), mode="overwrite",
                    schema_mode="overwrite")
    with pytest.raises(SinkCannotTake, match="column 'n' is string in the table, int64"):
        delta_sink.check(1, rows)
