"""Transactional Kafka sink (DESIGN §6): Kafka -> windows -> Kafka, exactly once.

One fixed ``transactional.id`` per pipeline and sink. ``commit(N)``:

1. ``init_transactions()``: fences every earlier producer with this id (a zombie attempt can no
   longer commit) and aborts its pending transaction, if any;
2. read this sink's last committed epoch marker with ``isolation.level=read_committed``;
3. skip if it is ``>= N``;
4. ``begin_transaction`` -> produce N's rows to the topic and N's marker to the marker topic ->
   ``commit_transaction``.

Rows and marker are one transaction, so a ``read_committed`` consumer sees both or neither, and
the marker tells every later attempt that N is done. The whole transaction lives inside one
call, so Flink's failure mode (a transaction pre-committed in one checkpoint, committed in a
later one, expired by ``transaction.timeout.ms`` in between: data loss) cannot happen here: a
transaction that times out was never reported committed, and the retry redoes it.

Records: key = the group fields as compact JSON with sorted keys (no key where the output has
no group fields); value = a JSON object of the output columns (timestamps ISO-8601 UTC with
milliseconds, decimals as exact JSON numbers, binary as base64); headers ``eos-pipeline``,
``eos-epoch``, ``eos-plan-hash``, and ``eos-lineage`` after a rewind. Consumers must read with
``isolation.level=read_committed``.

Rewinds (``eos.core.rewind``): published records cannot be withdrawn, so a rewind to N writes only a
marker saying N (carrying the rewind's id). The replay then publishes epochs N+1.. again, each
record headed ``eos-lineage: <rewind id>``: a consumer sees the rewind marker, then the replayed
epochs a second time, and can tell the two lines apart by that header. Every marker carries the
list of rewinds so far, so the current line survives the marker topic's compaction (it keeps
the last marker only).

What the embedded broker (librdkafka's mock cluster) does not do (DESIGN §2): fence
transactional ids and filter ``read_committed``. On it, steps 1 and 4 still run and the happy
path, the skip after a marker and crashes outside a transaction behave as on Kafka; a crash
inside a transaction and two concurrent attempts are only safe on a real broker.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from eos.core import faults
from eos.core.errors import SinkRejected, SinkUnavailable
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import (
    SinkCommit,
    SupportsAssets,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)

if TYPE_CHECKING:
    import confluent_kafka as ck
    import pyarrow as pa

TIMEOUT_S = 30.0
CREATE_TIMEOUT_S = 15.0
MARKER_SUFFIX = ".eos-markers"


class KafkaSinkOptions(BaseModel):
    """``{kafka: TOPIC}`` or ``{kafka: {topic: T, marker_topic: M, partitions: P, client: {}}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    marker_topic: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]+$")
    partitions: int | None = Field(default=None, gt=0)  # when the sink creates the topic
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @property
    def markers(self) -> str:
        return self.marker_topic or self.topic + MARKER_SUFFIX


def _kafka_error(error: BaseException) -> Any:
    return error.args[0] if error.args else None


class KafkaSink(SupportsRewind, SupportsReadBack, SupportsAssets):
    kind = "kafka"
    withdraws = False  # a published record stays published: rewinds republish
    options: KafkaSinkOptions

    @classmethod
    def parse_options(cls, options: Any) -> KafkaSinkOptions:
        data = {"topic": options} if isinstance(options, str) else options
        return validated_options(KafkaSinkOptions, data, "kafka sink")

    @classmethod
    def describe(cls, options: KafkaSinkOptions) -> str:
        return options.topic

    @property
    def transactional_id(self) -> str:
        """Fixed per pipeline and sink: the broker fences older producers by this id."""
        return f"eos:{self.config.name}:{self.name}"

    def _settings(self) -> dict[str, Any]:
        from eos.core.kafka import client_settings

        return client_settings({**self.config.kafka.client, **self.options.client})

    # -- the contract -------------------------------------------------------------------------

    def committed_epoch(self, fence: bool = True) -> int:
        """Fence earlier producers of this sink (``init_transactions``), then read the marker."""
        if fence:
            self._fenced_producer()
        return self._last_marker()

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """One Kafka transaction holding N's rows and N's marker; see the module docstring."""
        self.prepare(rows.schema)
        producer = self._fenced_producer()
        last = self._last_marker_value()
        held = NO_EPOCH if last is None else int(last["epoch"])
        if held >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
        if held != epoch - 1:
            from eos.core.errors import ProtocolViolation

            raise ProtocolViolation(
                f"Kafka sink {self.name} holds epoch {held}; it cannot receive epoch {epoch} "
                "(epochs are committed in order)"
            )
        faults.hit("sink.before_write")
        headers = self._headers(epoch, plan_hash, _line_of(last).get("lineage"))
        try:
            producer.begin_transaction()
            self._produce_rows(producer, rows, headers)
            faults.hit("sink.kafka.in_transaction")
            marker = {"pipeline": self.config.name, "epoch": epoch, "plan_hash": plan_hash,
                      "rows": rows.num_rows, **_line_of(last)}
            producer.produce(self.options.markers, key=self.config.name.encode(),
                             value=json.dumps(marker, sort_keys=True).encode(), partition=0,
                             headers=headers)
            self._commit_transaction(producer)
        except Exception as error:
            return self._after_failed_transaction(producer, epoch, rows.num_rows, error)
        return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)

    def abort(self, epoch: int) -> None:
        """Abort this sink's pending transaction, if any (``init_transactions`` does exactly
        that, and fences the producer that left it)."""
        self._fenced_producer()

    def rewind_target(self, epoch: int) -> None:
        """Nothing to go back to: a topic has no versions (``rewind`` writes a marker)."""
        return None

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """One transaction holding a marker of ``epoch`` that names this rewind: the next
        commits republish ``epoch + 1..`` under the rewind's lineage. Nothing is withdrawn."""
        self.prepare(schema)
        producer = self._fenced_producer()
        last = self._last_marker_value()
        if last is not None and last.get("rewind") == rewind_id:
            return None
        rewinds = [*_line_of(last).get("rewinds", []), [rewind_id, epoch]]
        marker = {"pipeline": self.config.name, "epoch": epoch, "rewind": rewind_id,
                  "lineage": rewind_id, "rewinds": rewinds}
        try:
            producer.begin_transaction()
            producer.produce(self.options.markers, key=self.config.name.encode(),
                             value=json.dumps(marker, sort_keys=True).encode(), partition=0)
            self._commit_transaction(producer)
        except Exception as error:
            with contextlib.suppress(Exception):
                producer.abort_transaction(TIMEOUT_S)
            raise SinkUnavailable(f"Kafka sink {self.name}: the rewind marker of epoch {epoch} "
                                  f"did not commit ({error}); rerunning the rewind is safe"
                                  ) from None
        return None

    def read_back(self) -> list[dict[str, Any]]:
        """This pipeline's committed rows on the sink's current line, as a ``read_committed``
        consumer sees them, less the records a rewind superseded: for each epoch, the records
        of the lineage that published it last (see the module docstring)."""
        from eos.core.outputs import output_schema

        schema = output_schema(self.config, self.output)
        last = self._last_marker_value()
        if last is None:
            return []
        rewinds = _line_of(last).get("rewinds", [])
        rows = []
        for record in self._read_topic(self.options.topic):
            if _header(record, "eos-pipeline") != self.config.name:
                continue
            epoch = int(_header(record, "eos-epoch") or NO_EPOCH)
            if epoch <= last["epoch"] and _header(record, "eos-lineage") == _owner(rewinds,
                                                                                    epoch):
                rows.append(decode_value(record.value(), schema))
        return rows

    def commits(self) -> list[int]:
        """Marker epochs in order; a rewind marker of N drops the ones after N."""
        epochs: list[int] = []
        for marker in self._marker_values(self._read_topic(self.options.markers)):
            if marker.get("rewind"):
                epochs = [e for e in epochs if e <= marker["epoch"]]
            else:
                epochs.append(marker["epoch"])
        return epochs

    def asset_uri(self) -> str:
        return f"kafka://{self.config.name}/{self.options.topic}"

    def prepare(self, schema: pa.Schema | None = None) -> None:
        """Create the output topic and the marker topic where the broker allows it."""
        settings = self._settings()
        ensure_topic(settings, self.options.topic, self.options.partitions)
        ensure_topic(settings, self.options.markers, 1, {"cleanup.policy": "compact"})

    # -- helpers ------------------------------------------------------------------------------

    def _fenced_producer(self) -> ck.Producer:
        import confluent_kafka as ck

        producer = ck.Producer({
            **self._settings(),
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": 60_000,
            "partitioner": "murmur2_random",  # Java clients' partitioner: same key, same partition
            "linger.ms": 20,
        })
        try:
            producer.init_transactions(TIMEOUT_S)
        except ck.KafkaException as error:
            raise SinkUnavailable(
                f"Kafka sink {self.name}: init_transactions for '{self.transactional_id}' failed: "
                f"{_kafka_error(error)}"
            ) from None
        return producer

    def _headers(self, epoch: int, plan_hash: str,
                 lineage: str | None = None) -> list[tuple[str, bytes]]:
        headers = [("eos-pipeline", self.config.name.encode()),
                   ("eos-epoch", str(epoch).encode()), ("eos-plan-hash", plan_hash.encode())]
        return headers + ([("eos-lineage", lineage.encode())] if lineage else [])

    def _produce_rows(self, producer: ck.Producer, rows: pa.Table,
                      headers: list[tuple[str, bytes]]) -> None:
        import confluent_kafka as ck

        failures: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        # Windows and late rows are keyed by their group fields (one group, one partition);
        # quarantined records have no group.
        group = list(self.config.group_by) if self.output != "quarantine" else []
        keys = encode_keys(rows, group)
        for key, value in zip(keys, encode_values(rows), strict=True):
            while True:
                try:
                    producer.produce(self.options.topic, key=key, value=value, headers=headers,
                                     on_delivery=delivered)
                    break
                except BufferError:  # the client's queue is full: let it drain
                    producer.poll(0.1)
                except ck.KafkaException as error:  # refused before it left the client
                    failures.append(_kafka_error(error))
                    break
            if failures:
                break
        if producer.flush(TIMEOUT_S) > 0:
            raise SinkUnavailable(f"Kafka sink {self.name}: rows not delivered within "
                                  f"{TIMEOUT_S:.0f}s")
        if failures:
            first = failures[0]
            kind = SinkRejected if _is_rejection(first) else SinkUnavailable
            raise kind(f"Kafka sink {self.name}: cannot write to topic '{self.options.topic}': "
                       f"{first} ({len(failures)} records refused)")

    def _commit_transaction(self, producer: ck.Producer) -> None:
        import confluent_kafka as ck

        for attempt in range(5):
            try:
                producer.commit_transaction(TIMEOUT_S)
                return
            except ck.KafkaException as error:
                kafka_error = _kafka_error(error)
                if kafka_error is not None and kafka_error.retriable() and attempt < 4:
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise

    def _after_failed_transaction(self, producer: ck.Producer, epoch: int, rows: int,
                                  error: Exception) -> SinkCommit:
        """The transaction did not commit. Scenarios:
        - the broker fenced us (a newer attempt called ``init_transactions``): if that attempt
          committed N, report ``ALREADY_COMMITTED`` (raced); else retry (transient);
        - the transaction must be aborted (a produce failed): abort, then re-raise typed;
        - anything else: abort if possible, and retry (transient).
        Nothing of N is visible to ``read_committed`` consumers in any of these cases.
        """
        kafka_error = _kafka_error(error)
        fatal = getattr(kafka_error, "fatal", lambda: False)()
        if not fatal:
            # If this fails too, the next attempt's init_transactions aborts the transaction.
            with contextlib.suppress(Exception):
                producer.abort_transaction(TIMEOUT_S)
        if isinstance(error, SinkRejected | SinkUnavailable):
            raise error
        if self._last_marker() >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows, raced=True)
        raise SinkUnavailable(
            f"Kafka sink {self.name}: transaction for epoch {epoch} did not commit "
            f"({kafka_error or error}); nothing of it is visible, retrying is safe"
        ) from None

    def _last_marker(self) -> int:
        """The epoch of this pipeline's last marker (-1 if none)."""
        last = self._last_marker_value()
        return NO_EPOCH if last is None else int(last["epoch"])

    def _last_marker_value(self) -> dict[str, Any] | None:
        """This pipeline's last marker, read with ``read_committed``: scan the marker partition
        backwards from its end until a marker of this pipeline appears. The last one, not the
        highest: after a rewind the last marker says a lower epoch, and it is the truth."""
        marks = self._watermarks(self.options.markers)
        if 0 not in marks:
            return None
        low, high = marks[0]
        step, end = 64, high
        while end > low:
            start = max(low, end - step)
            markers = self._marker_values(self._read_partition(self.options.markers, 0, start))
            if markers:
                return markers[-1]
            end, step = start, step * 4
        return None

    def _marker_values(self, records: Iterable[ck.Message]) -> list[dict[str, Any]]:
        """This pipeline's markers among ``records`` (other pipelines' skipped), in order."""
        mine = self.config.name.encode()
        return [json.loads(r.value()) for r in records if r.key() == mine]

    def _watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """(log start, high watermark) per partition; empty when the topic does not exist."""
        from eos.core.errors import TopicMissing
        from eos.core.kafka import topic_watermarks

        try:
            return topic_watermarks(self._settings(), topic)
        except TopicMissing:
            return {}

    def _read_topic(self, topic: str) -> Iterator[ck.Message]:
        for partition, (low, _high) in sorted(self._watermarks(topic).items()):
            yield from self._read_partition(topic, partition, low)

    def _read_partition(self, topic: str, partition: int, start: int) -> Iterator[ck.Message]:
        """Every ``read_committed`` record from ``start`` to the end of the partition."""
        from eos.core.kafka import read_partition

        yield from read_partition(self._settings(), topic, partition, start,
                                  group=f"eos-readback-{self.config.name}", timeout_s=TIMEOUT_S)


def ensure_topic(settings: dict[str, Any], topic: str, partitions: int | None,
                 topic_config: dict[str, str] | None = None) -> None:
    """Make sure ``topic`` exists: create it (CreateTopics) where the broker allows, else rely on
    the broker's auto-creation; a clear ``SinkRejected`` when neither works.

    The embedded broker does not implement CreateTopics (a request hangs until it times out,
    DESIGN §2), so there only auto-creation is asked for."""
    from concurrent.futures import TimeoutError as FutureTimeout

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from eos.core.kafka import is_embedded_broker

    admin = AdminClient(settings)
    try:
        if topic in admin.list_topics(timeout=TIMEOUT_S).topics:
            return
    except ck.KafkaException as error:
        raise SinkUnavailable(f"Kafka at {settings['bootstrap.servers']} did not answer: "
                              f"{_kafka_error(error)}") from None
    reason: Any = "not implemented by the embedded broker"
    if not is_embedded_broker(settings):
        created = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions or -1, replication_factor=-1,
                      config=topic_config or {})], request_timeout=CREATE_TIMEOUT_S)
        try:
            created[topic].result(CREATE_TIMEOUT_S + 5)
            return
        except ck.KafkaException as error:
            reason = _kafka_error(error)
            if reason is not None and reason.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS:
                return
        except FutureTimeout:
            reason = f"no answer within {CREATE_TIMEOUT_S:.0f}s"
    # A producer's metadata request auto-creates the topic where the broker allows it.
    probe = ck.Producer({**settings, "allow.auto.create.topics": True})
    probe.list_topics(topic, timeout=TIMEOUT_S)
    if topic not in admin.list_topics(timeout=TIMEOUT_S).topics:
        raise SinkRejected(
            f"output topic '{topic}' does not exist and could not be created "
            f"(CreateTopics: {reason}; auto-creation is off); create it, or let this "
            "pipeline's principal create topics"
        )


def _is_rejection(error: Any) -> bool:
    import confluent_kafka as ck

    code = error.code() if hasattr(error, "code") else None
    return code in (ck.KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                    ck.KafkaError.MSG_SIZE_TOO_LARGE, ck.KafkaError.RECORD_LIST_TOO_LARGE,
                    ck.KafkaError.INVALID_RECORD)


def _line_of(marker: dict[str, Any] | None) -> dict[str, Any]:
    """What the next marker inherits from ``marker``: the current lineage (the last rewind's
    id) and every rewind so far ([id, to epoch], oldest first). Nothing before any rewind."""
    if not marker or not marker.get("rewinds"):
        return {}
    return {"lineage": marker["lineage"], "rewinds": marker["rewinds"]}


def _owner(rewinds: list[list[Any]], epoch: int) -> str | None:
    """The lineage that published ``epoch`` last: the latest rewind to before ``epoch`` (its
    replay republished it), or the original line (no header) if no rewind went below it."""
    owner = None
    for rewind_id, to_epoch in rewinds:
        if epoch > to_epoch:
            owner = rewind_id
    return owner


def _header(message: ck.Message, name: str) -> str | None:
    for key, value in message.headers() or []:
        if key == name:
            return value.decode() if value is not None else None
    return None


# -- the record value: a JSON object of the output columns, typed by the output's schema -------

def _fragments(column: pa.ChunkedArray) -> list[str]:
    """Each value of a column as JSON text, built a column at a time (rows are many, columns
    few): timestamps ISO-8601 UTC with milliseconds, decimals with every digit, binary base64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind):
        try:  # milliseconds (outputs hold ms times); finer values keep their digits, never cut
            column = column.cast(pa.timestamp("ms", tz="UTC"))
        except pa.ArrowInvalid:
            column = column.cast(pa.timestamp("us", tz="UTC"))
        texts = pc.strftime(column, format="%Y-%m-%dT%H:%M:%SZ").to_pylist()
        return ["null" if t is None else f'"{t}"' for t in texts]
    values = column.to_pylist()
    if pa.types.is_decimal(kind):
        return ["null" if v is None else format(v, "f") for v in values]
    if pa.types.is_binary(kind):
        return ["null" if v is None else f'"{base64.b64encode(v).decode()}"' for v in values]
    dumps = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode
    return ["null" if v is None else dumps(v) for v in values]


def encode_values(rows: pa.Table) -> list[bytes]:
    """The record value of every output row: a JSON object of every column, in schema order."""
    prefixes = [json.dumps(name) + ":" for name in rows.schema.names]
    columns = [_fragments(rows.column(name)) for name in rows.schema.names]
    return [("{" + ",".join(p + v for p, v in zip(prefixes, values, strict=True)) + "}").encode()
            for values in zip(*columns, strict=True)] if columns else []


def encode_keys(rows: pa.Table, group: list[str]) -> list[bytes | None]:
    """The record key of every row: the group fields as compact JSON with sorted keys."""
    if not group:
        return [None] * rows.num_rows
    return list(encode_values(rows.select(sorted(group))))


def decode_value(raw: bytes, schema: pa.Schema) -> dict[str, Any]:
    """The inverse of ``encode_value``: JSON back to the Python values of the schema's types."""
    import pyarrow as pa

    doc = json.loads(raw, parse_float=Decimal)
    row: dict[str, Any] = {}
    for field in schema:
        value = doc.get(field.name)
        if value is None:
            row[field.name] = None
        elif pa.types.is_timestamp(field.type):
            row[field.name] = datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif pa.types.is_floating(field.type):
            row[field.name] = float(value)
        elif pa.types.is_decimal(field.type):
            row[field.name] = Decimal(value)
        elif pa.types.is_binary(field.type):
            row[field.name] = base64.b64decode(value)
        else:
            row[field.name] = value
    return row
