"""The audit's second readings: everything it reads from Kafka, Delta and PostgreSQL read again
by readers that share no library with the pipeline (``eos.tools.audit.independent.compare``:
aiokafka, DuckDB's
delta extension; ``eos.tools.audit.independent.postgres``: DuckDB's postgres extension). Any
difference between the two readings is a problem of its own (``READERS_DISAGREE``): a bug in
confluent-kafka, delta-rs or psycopg cannot show the audit the same wrong picture it showed the
pipeline."""

from __future__ import annotations

from typing import Any, NamedTuple

from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings
from eos.core.plan import Plan
from eos.core.sink import Sink, SupportsReadBack
from eos.tools.audit.independent import compare as independent
from eos.tools.audit.independent import delta as independent_delta
from eos.tools.audit.independent import kafka as independent_kafka
from eos.tools.audit.reference import Record
from eos.tools.audit.report import AuditReport, Problem, ProblemKind

LIBRARY_KAFKA = "confluent-kafka"
LIBRARY_DELTA = "delta-rs"
LIBRARY_POSTGRES = "psycopg2"
LIBRARY_ICEBERG = "pyiceberg"
READ_BACK_ATTEMPTS = 3


def _source_row(partition: int, offset: int, timestamp_ms: int, value: bytes | None,
                key: bytes | None) -> dict:
    return {"partition": partition, "offset": offset, "timestamp_ms": timestamp_ms,
            "value": value, "key": key}


def reread_source(report: AuditReport, settings: dict[str, Any],
                  epochs: list[tuple[Plan, list[Record]]]) -> list[Problem]:
    """The committed ranges read again with aiokafka: the same records (offset, timestamp,
    key, value) as confluent-kafka read, or a ``READERS_DISAGREE`` problem per record that differs.
    A record is compared once even when ranges overlap (``check_offsets`` reports overlaps)."""
    problems: list[Problem] = []
    for topic in dict.fromkeys(r.topic for plan, _ in epochs for r in plan.ranges):
        ranges = [(r.partition, r.start, r.until) for plan, _ in epochs for r in plan.ranges
                  if r.topic == topic]
        ours = {(r.partition, r.offset): _source_row(r.partition, r.offset, r.timestamp_ms,
                                                    r.value, r.key)
                for _, records in epochs for r in records if r.topic == topic}
        theirs = {(r.partition, r.offset): _source_row(r.partition, r.offset, r.timestamp_ms,
                                                      r.value, r.key)
                  for r in independent_kafka.read_ranges(settings, topic, ranges)}
        where = f"source {topic}"
        # Read in batches of epochs (``eos.tools.audit.verify``): the counts add up.
        _, before = report.second_readings.get(where, (independent_kafka.KAFKA_READER, 0))
        report.second_readings[where] = (independent_kafka.KAFKA_READER, before + len(theirs))
        problems += _disagreements(where, (LIBRARY_KAFKA, ours.values()),
                                   (independent_kafka.KAFKA_READER, theirs.values()))
    return problems


def read_back_with_version(sink: SupportsReadBack, since: int = 0
                           ) -> tuple[list[dict[str, Any]], int | None]:
    """The sink's rows (of epoch ``since`` or later) as its own reader returns them and, for a
    Delta sink, the table version
    they are of (the independent reader reads that version), for a PostgreSQL sink its last
    committed epoch: the version is taken before and after the read, and the read repeated
    while a commit lands in between. None: no stable version (the audit ran while the table
    kept changing)."""
    from eos.sinks.delta.sink import DeltaSink
    from eos.sinks.iceberg.sink import IcebergSink
    from eos.sinks.postgres.sink import PostgresSink

    if isinstance(sink, PostgresSink):
        return _read_back_postgres(sink, since)
    if isinstance(sink, IcebergSink):  # its rows and the snapshot they are of, one reading
        return sink.pinned(since)
    if not isinstance(sink, DeltaSink):
        return sink.read_back(since), None
    from deltalake import DeltaTable

    held: list[dict[str, Any]] = []
    for _ in range(READ_BACK_ATTEMPTS):
        before = DeltaTable(sink.path).version()
        held = sink.read_back(since)
        if DeltaTable(sink.path).version() == before:
            return held, before
    return held, None


def _read_back_postgres(sink: Any, since: int) -> tuple[list[dict[str, Any]], int | None]:
    """The PostgreSQL sink's rows and the last epoch of its markers, unchanged across the
    read (the table and its markers change together, in one transaction per epoch)."""
    held: list[dict[str, Any]] = []
    for _ in range(READ_BACK_ATTEMPTS):
        before = sink.commits()
        held = sink.read_back(since)
        if sink.commits() == before:
            return held, before[-1] if before else -1
    return held, None


def reread_sink(report: AuditReport, config: PipelineConfig, sink: Sink,
                held: list[dict[str, Any]], version: int | None, since: int = 0
                ) -> list[Problem]:
    """The sink read again by its independent reader and compared whole with ``held`` (what
    the sink's own reader returned, of epoch ``since`` or later): every row, every column."""
    from eos.sinks.delta.sink import DeltaSink
    from eos.sinks.iceberg.sink import IcebergSink
    from eos.sinks.kafka.sink import KafkaSink
    from eos.sinks.postgres.sink import PostgresSink

    if isinstance(sink, PostgresSink):
        return _reread_postgres(report, sink, held, version, since)
    if isinstance(sink, IcebergSink):
        from eos.tools.audit.independent.iceberg import ICEBERG_READER

        library, reader, rows = LIBRARY_ICEBERG, ICEBERG_READER, _reread_iceberg(
            sink, version, since)
    elif isinstance(sink, DeltaSink):
        library, reader, rows = LIBRARY_DELTA, independent_delta.DELTA_READER, _reread_delta(
            sink, version, since)
    elif isinstance(sink, KafkaSink):
        library, reader, rows = LIBRARY_KAFKA, independent_kafka.KAFKA_READER, _reread_kafka(
            config, sink, since)
    else:
        rows = _Unread(f"no independent reader for {sink.kind} sinks", fails=False)
    if isinstance(rows, _Unread):
        if rows.fails:
            return [Problem(ProblemKind.SECOND_READER, sink.name, rows.why)]
        report.single_reader[sink.name] = rows.why
        return []
    report.second_readings[sink.name] = (reader, len(rows))
    return _disagreements(sink.name, (library, held), (reader, rows))


class _Unread(NamedTuple):
    """Why a sink was not read a second time; ``fails``: the audit cannot vouch for the sink
    (else it is only noted in the report, as for a sink type nobody can read twice)."""

    why: str
    fails: bool


def _reread_delta(sink: Any, version: int | None, since: int
                  ) -> list[dict[str, Any]] | _Unread:
    """DuckDB's reading of the table at ``version``. Object storage is read by one reader only
    (noted); a table that would not hold still or a DuckDB error fails the audit."""
    import duckdb

    path = independent_delta.readable_location(sink.path)
    if path is None:
        return _Unread(f"{independent_delta.DELTA_READER} reads local and s3:// tables here (no "
                       "credentials for other stores in DuckDB)", fails=False)
    if version is None:
        return _Unread(f"the table changed during each of {READ_BACK_ATTEMPTS} readings: no "
                       "one version to read twice", fails=True)
    try:
        return independent_delta.read_delta(path, version, since)
    except (duckdb.Error, OSError, ImportError) as error:
        return _Unread(f"{independent_delta.DELTA_READER} could not read {path} at version "
                       f"{version}: {error}", fails=True)


def _reread_iceberg(sink: Any, snapshot: int | None, since: int
                    ) -> list[dict[str, Any]] | _Unread:
    """DuckDB's reading of the snapshot pyiceberg read, found through the table's current
    metadata file (which lists every snapshot kept). A DuckDB error fails the audit."""
    import duckdb

    from eos.core.errors import EosError
    from eos.sinks.iceberg.sink import NO_SNAPSHOT
    from eos.tools.audit.independent.iceberg import ICEBERG_READER, read_iceberg

    if snapshot is None or snapshot == NO_SNAPSHOT:
        return []
    try:
        location = sink.metadata_location()
        if location is None:
            return _Unread("the table was dropped after pyiceberg read it", fails=True)
        return read_iceberg(location, snapshot, since)
    except (duckdb.Error, OSError, ImportError, EosError) as error:
        return _Unread(f"{ICEBERG_READER} could not read snapshot {snapshot}: {error}",
                       fails=True)


def _reread_postgres(report: AuditReport, sink: Any, held: list[dict[str, Any]],
                     version: int | None, since: int) -> list[Problem]:
    """DuckDB's reading of the table and of the markers, compared with psycopg2's: the rows
    whole, the markers' epochs one by one. Both readings must be of epoch ``version``; a
    commit in between (or a table that would not hold still) fails the audit, which is run
    again on a pipeline at rest."""
    from eos.core.errors import EosError
    from eos.sinks.postgres.connection import dsn_for
    from eos.tools.audit.independent.postgres import POSTGRES_READER, read_postgres

    reader = POSTGRES_READER
    if version is None:
        return [Problem(ProblemKind.SECOND_READER, sink.name, f"the sink committed during each "
                        f"of {READ_BACK_ATTEMPTS} readings: no one epoch to read twice")]
    try:
        dsn = dsn_for(sink.options.connection, sink.options.dsn_env)
        reading = read_postgres(dsn, sink.table, sink.options.marker(),
                                sink.config.name, sink.name, since)
    except EosError as error:  # SinkUnavailable (password removed), ConfigError
        return [Problem(ProblemKind.SECOND_READER, sink.name, str(error))]
    seen = reading.epochs[-1] if reading.epochs else -1
    if seen != version:
        return [Problem(ProblemKind.SECOND_READER, sink.name, (
            f"{reader} read the sink at epoch {seen}, {LIBRARY_POSTGRES} at {version}: it "
            "committed between the two readings"))]
    report.second_readings[sink.name] = (reader, len(reading.rows))
    markers = [{"marker epoch": e} for e in sink.commits() if e <= version]
    return (_disagreements(sink.name, (LIBRARY_POSTGRES, held), (reader, reading.rows))
            + _disagreements(f"{sink.name} markers", (LIBRARY_POSTGRES, markers),
                             (reader, [{"marker epoch": e} for e in reading.epochs])))


def _reread_kafka(config: PipelineConfig, sink: Any, since: int) -> list[dict[str, Any]]:
    """The sink's output topic read with aiokafka, this pipeline's records (of epoch ``since``
    or later) on the sink's current line decoded by the independent JSON decoder."""
    from eos.core.outputs import output_schema

    settings = client_settings({**config.kafka.client, **sink.options.client})
    records = independent_kafka.read_topic(
        settings, sink.options.topic, independent_kafka.from_epoch(since) if since else None)
    decode = None
    if sink.options.format == "avro":  # urllib and fastavro, not the sink's codec
        from eos.tools.audit.avro import sink_decoder

        decode = sink_decoder(sink.options.schema_registry or config.event.schema_registry)
    return independent_kafka.sink_rows(records, config.name,
                                       output_schema(config, sink.output),
                                       independent_kafka.current_line(sink), decode)


def _disagreements(where: str, ours: tuple[str, Any], theirs: tuple[str, Any]) -> list[Problem]:
    return [Problem(ProblemKind.READERS_DISAGREE, where, str(d), d.count)
            for d in independent.disagreements(ours, theirs)]
