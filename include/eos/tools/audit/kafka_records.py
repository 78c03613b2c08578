"""The audit of a Kafka sink of rows beyond its values: each record's key and own headers.

A sink with ``key`` or ``headers`` writes, for every row, a key (the key column's value, or
its expression's, recomputed with DuckDB like a select column) and headers (the source
record's, carried, then the ones ``set`` names). The topic is read here
by the independent reader (aiokafka, ``eos.tools.audit.independent.compare``), each record placed
by the
coordinates in its value, and compared with what the reference row and the re-read source
record say it must hold: a key or a header lost, changed or added is reported as wrong values.
Records of one key must also keep their source order within the partition they land in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eos.core.config import PipelineConfig
from eos.tools.audit.report import AuditReport, Problem, ProblemKind

EOS_HEADERS = "eos-"
_SHOWN = 5  # problems reported one by one; the rest are counted


def _bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _expected(sink: Any, row: dict[str, Any]) -> tuple[bytes | None, list[tuple[str, Any]]]:
    """The key and own headers a record of ``row`` must carry (docs/pipelines.md)."""
    options = sink.options

    def source(role: str, text: str) -> str:  # a column, or the expression's record column
        return sink.config.record_column(sink.name, role) or text

    key = _bytes(row.get(source("key", options.key))) if options.key else None
    headers: list[tuple[str, Any]] = []
    if options.headers is not None:
        if options.headers.carry:
            headers += [(h["key"], h["value"]) for h in row.get("kafka_headers") or ()
                        if not h["key"].lower().startswith(EOS_HEADERS)]
        headers += [(name, _bytes(row.get(source(f"header:{name}", text))))
                    for name, text in options.headers.set.items()]
    return key, headers


def compare_kafka_records(report: AuditReport, config: PipelineConfig, sink: Any,
                          want: Iterable[dict[str, Any]]) -> None:
    """Every record of a keyed or headed Kafka sink of rows against its reference row."""
    options = sink.options
    if options.key is None and options.headers is None:
        return
    from eos.core.kafka import client_settings
    from eos.core.outputs import output_schema
    from eos.tools.audit.independent import kafka as independent_kafka
    decode = independent_kafka.decode_json
    if options.format == "avro":
        from eos.tools.audit.avro import sink_decoder

        decode = sink_decoder(options.schema_registry or config.event.schema_registry)
    schema = output_schema(config, "rows")
    expected = {(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"]): r for r in want}
    settings = client_settings({**config.kafka.client, **options.client})
    on_line = independent_kafka.current_line(sink)
    wrong: list[str] = []
    order: dict[tuple[int, bytes | None], dict[tuple[str, int], int]] = {}
    records = independent_kafka.read_topic(settings, options.topic)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        mine = dict(independent_kafka.record_headers(record))
        if mine.get("eos-pipeline") != config.name or mine.get("eos-epoch") is None:
            continue
        if not on_line(int(mine["eos-epoch"] or -1), mine.get("eos-lineage")):
            continue
        value = decode(record.value, schema) if record.value is not None else {}
        where = (value.get("kafka_topic"), value.get("kafka_partition"),
                 value.get("kafka_offset"))
        row = expected.get(where)
        if row is None:
            continue  # an unexpected row: the row comparison reports it
        key, headers = _expected(sink, row)
        own = [(k, v) for k, v in record.headers if not k.lower().startswith(EOS_HEADERS)]
        if options.key is not None and record.key != key:
            wrong.append(f"{where}: key {record.key!r}, expected {key!r}")
        if options.headers is not None and own != headers:
            wrong.append(f"{where}: headers {own}, expected {headers}")
        _check_order(order, record, where, wrong)
    for detail in wrong[:_SHOWN]:
        report.problems.append(Problem(ProblemKind.WRONG_VALUES, sink.name, detail))
    if len(wrong) > _SHOWN:
        report.problems.append(Problem(ProblemKind.WRONG_VALUES, sink.name,
                                       f"and {len(wrong) - _SHOWN} more records' keys or "
                                       "headers", len(wrong) - _SHOWN))


def _check_order(order: dict[tuple[int, bytes | None], dict[tuple[str, int], int]],
                 record: Any, where: tuple, wrong: list[str]) -> None:
    """A key's records in one output partition hold their source records in offset order
    (per source partition): the last source offset seen of each must grow."""
    seen = order.setdefault((record.partition, record.key), {})
    source = (where[0], where[1])
    if where[2] is not None and seen.get(source, -1) >= where[2]:
        wrong.append(f"{where}: key {record.key!r} out of its source order in partition "
                     f"{record.partition} (after offset {seen[source]})")
    if where[2] is not None:
        seen[source] = max(seen.get(source, -1), where[2])
