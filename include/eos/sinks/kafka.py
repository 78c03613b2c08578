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

Records (``eos.sinks.kafka_records``): key = the group fields as compact JSON with sorted keys;
value = a JSON object of the output columns; headers ``eos-pipeline``, ``eos-epoch``,
``eos-plan-hash``, and ``eos-lineage`` after a rewind. Topics are made to exist by
``eos.sinks.kafka_topics``. Consumers must read with
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

import contextlib
import json
import time
from collections.abc import Iterable, Iterator
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
from eos.sinks.kafka_records import decode_value, encode_keys, encode_values
from eos.sinks.kafka_topics import TIMEOUT_S, ensure_topic, kafka_error

if TYPE_CHECKING:
    import confluent_kafka as ck
    import pyarrow as pa

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
                f"{kafka_error(error)}"
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
                    failures.append(kafka_error(error))
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
                failure = kafka_error(error)
                if failure is not None and failure.retriable() and attempt < 4:
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
        failure = kafka_error(error)
        fatal = getattr(failure, "fatal", lambda: False)()
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
            f"({failure or error}); nothing of it is visible, retrying is safe"
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
