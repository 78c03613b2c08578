"""The audit's second reader of Kafka (``eos.tools.audit.independent.compare``): aiokafka, a
pure-Python
client (no librdkafka), ``isolation_level="read_committed"``, over source ranges and Kafka sinks'
output topics. A sink's records are picked by their headers (``eos-pipeline``, ``eos-epoch``,
``eos-lineage``) and decoded from JSON here, not by ``eos.sinks.records``. Which (epoch,
lineage) pairs are on the sink's current line is the sink's own bookkeeping (its markers, read by
``current_line``), so this module does not depend on where or how markers are kept.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import concurrent.futures
import json
import logging
import re
from collections.abc import Callable, Coroutine, Iterable
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from eos.core.errors import KafkaUnavailable
from eos.tools.audit.independent.compare import canonical_row

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.sinks.kafka.sink import KafkaSink

KAFKA_READER = "aiokafka"
READ_TIMEOUT_S = 30.0
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z$")
T = TypeVar("T")


class KafkaRecord(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def aiokafka_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a pipeline's (librdkafka-style) client settings, as aiokafka's
    arguments: bootstrap, client id, security protocol, SASL PLAIN/SCRAM and SSL files. The rest
    tunes librdkafka and has no meaning here; a broker that needs more refuses the connection,
    which fails the read (``KafkaUnavailable``), never passes it."""
    conf: dict[str, Any] = {"bootstrap_servers": settings["bootstrap.servers"]}
    simple = {"client.id": "client_id", "sasl.username": "sasl_plain_username",
              "sasl.password": "sasl_plain_password"}
    conf.update({ours: settings[theirs] for theirs, ours in simple.items() if theirs in settings})
    if "security.protocol" in settings:
        conf["security_protocol"] = str(settings["security.protocol"]).upper()
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms"))
    if mechanism:
        conf["sasl_mechanism"] = str(mechanism).upper()
    if conf.get("security_protocol", "").endswith("SSL"):
        from aiokafka.helpers import create_ssl_context

        conf["ssl_context"] = create_ssl_context(
            cafile=settings.get("ssl.ca.location"), certfile=settings.get(
                "ssl.certificate.location"), keyfile=settings.get("ssl.key.location"),
            password=settings.get("ssl.key.password"))
    return conf


def read_ranges(settings: dict[str, Any], topic: str,
                ranges: Iterable[tuple[int, int, int]]) -> list[KafkaRecord]:
    """Every committed record in the ``(partition, start, until)`` ranges of ``topic``; ranges
    of one partition are merged first (a range read twice is read once)."""
    rounds = _rounds(_merged(ranges))
    return [r for batch in rounds for r in _run(_read(settings, topic, batch))]


def read_topic(settings: dict[str, Any], topic: str,
               keep: Callable[[KafkaRecord], bool] | None = None) -> list[KafkaRecord]:
    """Every committed record of ``topic`` (that ``keep`` keeps: the others are dropped as
    they arrive, so an audit of the last epochs holds only theirs), from each partition's log
    start to its last stable offset (what ``read_committed`` may see), in partition and
    offset order."""
    return _run(_read(settings, topic, None, keep))


def _merged(ranges: Iterable[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    """Non-empty ranges per partition, overlapping or touching ones joined."""
    per: dict[int, list[tuple[int, int]]] = {}
    for partition, start, until in sorted(ranges):
        if until <= start:
            continue
        spans = per.setdefault(partition, [])
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], until))
        else:
            spans.append((start, until))
    return per


def _rounds(per: dict[int, list[tuple[int, int]]]) -> list[dict[int, tuple[int, int]]]:
    """Reads of one span per partition each: one consumer reads every partition of a round."""
    depth = max((len(spans) for spans in per.values()), default=0)
    return [{p: spans[i] for p, spans in per.items() if i < len(spans)} for i in range(depth)]


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code, also when this thread already runs
    an event loop (then on a thread of its own)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _read(settings: dict[str, Any], topic: str, spans: dict[int, tuple[int, int]] | None,
                keep: Callable[[KafkaRecord], bool] | None = None) -> list[KafkaRecord]:
    """One ``read_committed`` consumer over ``spans`` (partition -> [start, until)), or over
    the whole topic when None. Offsets may have gaps (transaction markers, compaction), so a
    partition is done when the consumer's position reaches ``until``, never by counting."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    conf = aiokafka_settings(settings)
    consumer = AIOKafkaConsumer(**conf, group_id=None, enable_auto_commit=False,
                                isolation_level="read_committed", auto_offset_reset="none")
    with _quiet():
        try:
            await consumer.start()
            try:
                spans = spans if spans is not None else await _whole(conf, consumer, topic)
                return await _consume(consumer, topic, spans, keep)
            finally:
                await consumer.stop()
        except KafkaError as error:
            raise KafkaUnavailable(f"the audit's independent reader ({KAFKA_READER}) could not "
                                   f"read topic '{topic}': {error!r}") from None


async def _whole(conf: dict[str, Any], consumer: Any, topic: str) -> dict[int, tuple[int, int]]:
    """Every partition of ``topic`` from its log start to its last stable offset."""
    from aiokafka import TopicPartition

    partitions = await _partitions(conf, topic)
    tps = [TopicPartition(topic, p) for p in partitions]
    if not tps:
        return {}
    starts = await consumer.beginning_offsets(tps)
    ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
    return {tp.partition: (starts[tp], ends[tp]) for tp in tps}


async def _partitions(conf: dict[str, Any], topic: str) -> list[int]:
    """The partition ids of ``topic`` as the broker's metadata lists them."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**conf)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(p["partition"] for t in described if t["topic"] == topic and not t["error_code"]
                  for p in t["partitions"])


async def _consume(consumer: Any, topic: str, spans: dict[int, tuple[int, int]],
                   keep: Callable[[KafkaRecord], bool] | None = None) -> list[KafkaRecord]:
    from aiokafka import TopicPartition

    tps = {p: TopicPartition(topic, p) for p, (start, until) in spans.items() if until > start}
    if not tps:
        return []
    consumer.assign(list(tps.values()))
    for p, tp in tps.items():
        consumer.seek(tp, spans[p][0])
    found: list[KafkaRecord] = []
    pending = set(tps)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_TIMEOUT_S
    while pending:
        if loop.time() > deadline:
            raise KafkaUnavailable(
                f"the audit's independent reader ({KAFKA_READER}) did not reach the end of "
                f"{topic} partitions {sorted(pending)} within {READ_TIMEOUT_S:.0f}s")
        batches = await consumer.getmany(*[tps[p] for p in pending], timeout_ms=500)
        for tp, messages in batches.items():
            until = spans[tp.partition][1]
            read = (KafkaRecord(m.partition, m.offset, m.timestamp, m.key, m.value,
                                tuple(m.headers or ())) for m in messages if m.offset < until)
            found.extend(read if keep is None else filter(keep, read))
        for p in list(pending):
            if await consumer.position(tps[p]) >= spans[p][1]:
                pending.discard(p)
    return sorted(found, key=lambda r: (r.partition, r.offset))


class _quiet:
    """aiokafka logs connection retries and metadata warnings as it goes: the audit reports
    failures itself, so its loggers say only errors while it reads."""

    def __enter__(self) -> None:
        self.logger = logging.getLogger("aiokafka")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        self.logger.setLevel(self.level)


def current_line(sink: KafkaSink) -> Callable[[int, str | None], bool]:
    """Whether records of (epoch, lineage) are on the Kafka sink's current line: epochs up to
    its last marker, each of the lineage that published it last. The sink's own bookkeeping
    (its markers and rewinds), read unfenced as ``read_back`` does, so that what is compared
    here is the records themselves and not two readings of the markers' layout."""

    return sink.current_line()


def sink_rows(records: Iterable[KafkaRecord], pipeline: str, schema: pa.Schema,
              on_line: Callable[[int, str | None], bool],
              decode: Callable[[bytes, pa.Schema], dict[str, Any]] | None = None
              ) -> list[dict[str, Any]]:
    """The committed rows of one pipeline in a Kafka sink's topic: records headed
    ``eos-pipeline: <pipeline>`` with an ``eos-epoch`` whose (epoch, ``eos-lineage``) is on
    the sink's current line, each value decoded from JSON by ``decode_json`` (or by ``decode``:
    an Avro sink's values, ``eos.tools.audit.avro.sink_decoder``)."""
    decode = decode or decode_json
    rows = []
    for record in records:
        headers = record_headers(record)
        if headers.get("eos-pipeline") != pipeline or headers.get("eos-epoch") is None:
            continue
        epoch = int(headers["eos-epoch"])  # type: ignore[arg-type]
        if on_line(epoch, headers.get("eos-lineage")) and record.value is not None:
            rows.append(decode(record.value, schema))
    return rows


def from_epoch(since: int) -> Callable[[KafkaRecord], bool]:
    """Whether a sink record is of epoch ``since`` or later (its ``eos-epoch`` header): the
    ``keep`` of ``read_topic`` for an audit of the last epochs."""
    def keep(record: KafkaRecord) -> bool:
        epoch = record_headers(record).get("eos-epoch")
        return epoch is not None and int(epoch) >= since

    return keep


def record_headers(record: KafkaRecord) -> dict[str, str | None]:
    """A record's headers by name (the last of a repeated name), values as text."""
    return {k: None if v is None else v.decode("utf-8", "replace") for k, v in record.headers}


def decode_json(raw: bytes, schema: pa.Schema) -> dict[str, Any]:
    """A sink record's JSON value as canonical values of the output's columns: times (ISO-8601
    UTC) as microseconds, decimals exact, doubles as floats, binary from base64. Written here
    again, not imported, so a decoder bug cannot agree with itself."""
    import pyarrow as pa

    doc = json.loads(raw, parse_float=Decimal)
    row: dict[str, Any] = {}
    for field in schema:
        value = doc.get(field.name)
        if value is None:
            row[field.name] = None
        elif pa.types.is_timestamp(field.type):
            row[field.name] = iso_micros(value)
        elif pa.types.is_date(field.type):
            row[field.name] = iso_date(value)
        elif pa.types.is_floating(field.type):
            row[field.name] = float(value)
        elif pa.types.is_decimal(field.type):
            row[field.name] = Decimal(value)
        elif pa.types.is_binary(field.type):
            row[field.name] = base64.b64decode(value, validate=True)
        elif pa.types.is_list(field.type):  # Kafka headers: [{key, value: base64 or null}]
            row[field.name] = [{"key": h["key"], "value": None if h["value"] is None
                                else base64.b64decode(h["value"], validate=True)}
                               for h in value]
        else:
            row[field.name] = value
    return canonical_row(row)


def iso_date(text: str) -> date:
    """``YYYY-MM-DD`` as a date (nothing else: a sink writes dates so)."""
    match = _ISO_DATE.match(text)
    if match is None:
        raise ValueError(f"not an ISO-8601 date: {text!r}")
    return date(*(int(part) for part in match.groups()))


def iso_micros(text: str) -> int:
    """``YYYY-MM-DDTHH:MM:SS[.fff…]Z`` as microseconds since the epoch (sub-microsecond digits
    must be zero: a sink never writes them)."""
    match = _ISO.match(text)
    if match is None:
        raise ValueError(f"not an ISO-8601 UTC time: {text!r}")
    *parts, fraction = match.groups()
    seconds = calendar.timegm(tuple(int(p) for p in parts))  # type: ignore[arg-type]
    digits = (fraction or "").ljust(9, "0")
    if int(digits[6:]):
        raise ValueError(f"a time finer than a microsecond: {text!r}")
    return seconds * 1_000_000 + int(digits[:6])
