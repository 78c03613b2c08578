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

Markers. A marker identifies **one sink of one pipeline**: its key is ``<pipeline>/<sink name>``
(``clicks_to_kafka/kafka:clicks-per-minute``) and its value names both (``pipeline``, ``sink``),
so sinks of one pipeline (windows, late, quarantine) never read each other's epochs. Step 2 must
never depend on another producer: a ``read_committed`` read stops at the partition's last
stable offset (LSO), and any producer's open transaction holds the LSO back, so on a partition
others write to, a crash between this sink's Kafka commit and the checkpoint could read N-1 on
the retry and publish N twice. Hence each sink's markers live in a partition **only this sink's
transactional id writes**: partition 0 of ``<topic>.eos-markers.<pipeline>`` (the output topic
and the pipeline name identify the sink: its name is ``kafka:<topic>``, unique per pipeline),
or of ``marker_topic`` when given, which then means "exclusive to this sink". After step 1 no
transaction of this id is open, so nothing holds that partition's LSO back and the read is
exact. The exclusivity is claimed at load time (``resources``: two sinks of one pipeline naming
one marker topic are refused) and defended whenever a fenced attempt reads its markers:

- a record there that is not this sink's marker (another sink or pipeline writes there):
  ``MarkerTopicShared``, a config error, never an answer;
- an LSO below the high watermark (another producer holds an open transaction there): a
  transient ``SinkUnavailable`` naming it, never an answer (the retry reads again).

Only the tail of the partition is read for the answer (its last marker of this sink), so a
foreign record is found when it is among the records read, which always includes the newest.

Migration from the markers of version 2 (key = the pipeline name, in the shared
``<topic>.eos-markers`` or in ``marker_topic``): while the new location holds no marker of this
sink, its last marker is read from that legacy location, so an upgrade neither republishes nor
refuses; the next commit writes into the new location. ``commits()`` lists the legacy markers
first. A legacy marker in an explicit ``marker_topic`` is not a foreign record.

Records (``eos.sinks.kafka_records``): key = the group fields as compact JSON with sorted keys;
value = a JSON object of the output columns (``format: avro``: the Schema Registry wire format,
``eos.sinks.kafka_avro``, its schema registered before the transaction opens); headers
``eos-pipeline``, ``eos-epoch``, ``eos-plan-hash``, and ``eos-lineage`` after a rewind. Topics
are made to exist by ``eos.sinks.kafka_topics``. Consumers must read with
``isolation.level=read_committed``.

Rewinds (``eos.core.rewind``): published records cannot be withdrawn, so a rewind to N writes only a
marker saying N (carrying the rewind's id). The replay then publishes epochs N+1.. again, each
record headed ``eos-lineage: <rewind id>``: a consumer sees the rewind marker, then the replayed
epochs a second time, and can tell the two lines apart by that header. Every marker carries the
list of rewinds so far, so the current line survives the marker topic's compaction (it keeps
the last marker only).

What the embedded broker (librdkafka's mock cluster) does not do (DESIGN §2): fence
transactional ids and filter ``read_committed`` (its LSO is always the high watermark). On it,
steps 1 and 4 still run and the happy path, the skip after a marker and crashes outside a
transaction behave as on Kafka; a crash inside a transaction, two concurrent attempts and the
LSO defence are only exercised on a real broker.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from eos.core import faults
from eos.core.config import SchemaRegistryConfig
from eos.core.errors import MarkerTopicShared, SinkCannotTake, SinkRejected, SinkUnavailable
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import (
    SinkCommit,
    SupportsAssets,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)
from eos.sinks.kafka_avro import AvroValues
from eos.sinks.kafka_records import decode_value, encode_keys, encode_values
from eos.sinks.kafka_topics import (
    MARKER_TOPIC_CONFIG,
    MAX_TOPIC_NAME,
    TIMEOUT_S,
    check_marker_topic,
    check_topic_name,
    ensure_topic,
    held_back,
    kafka_error,
)

DEFAULT_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's and Kafka's default record limit

if TYPE_CHECKING:
    import confluent_kafka as ck
    import pyarrow as pa

    from eos.core.config import PipelineConfig

MARKER_SUFFIX = ".eos-markers"
STABLE_ATTEMPTS = 3  # LSO checks before an open foreign transaction is reported (0.5 s apart)


class KafkaSinkOptions(BaseModel):
    """``{kafka: TOPIC}`` or ``{kafka: {topic: T, marker_topic: M, partitions: P, client: {},
    format: json|avro, schema_registry: {...}}}``. ``marker_topic``: where this sink's markers
    live, exclusive to this sink (default ``<topic>.eos-markers.<pipeline>``, see the module
    docstring). ``format: avro``: values in the Schema Registry wire format
    (``eos.sinks.kafka_avro``), registered with ``schema_registry``, else the event's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    marker_topic: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    partitions: int | None = Field(default=None, gt=0)  # when the sink creates the topic
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)
    format: Literal["json", "avro"] = "json"
    schema_registry: SchemaRegistryConfig | None = None

    @model_validator(mode="after")
    def _registry_for_avro(self) -> KafkaSinkOptions:
        if self.format == "json" and self.schema_registry is not None:
            raise ValueError("a kafka sink's schema_registry is for format: avro")
        return self

    @model_validator(mode="after")
    def _topic_names(self) -> KafkaSinkOptions:
        """Names Kafka accepts, checked as far as they are known without the pipeline's name
        (the default marker topic's full name is checked by ``KafkaSink.resources``)."""
        check_topic_name(self.topic, "topic")
        if self.marker_topic is not None:
            check_topic_name(self.marker_topic, "marker_topic")
        elif len(self.topic) + len(MARKER_SUFFIX) + 2 > MAX_TOPIC_NAME:
            raise ValueError(f"topic '{self.topic[:40]}...' leaves no room for its marker topic "
                             f"'<topic>{MARKER_SUFFIX}.<pipeline>' within Kafka's "
                             f"{MAX_TOPIC_NAME} characters; name a shorter marker_topic")
        return self

    @property
    def legacy_markers(self) -> str:
        """Where version 2 kept this sink's markers (key = the pipeline name): read only, to
        migrate (see the module docstring)."""
        return self.marker_topic or self.topic + MARKER_SUFFIX


def marker_topic_of(options: KafkaSinkOptions, pipeline: str) -> str:
    """The topic whose partition 0 holds this sink's markers and nothing else; a ValueError when
    the default name is longer than Kafka allows."""
    if options.marker_topic is not None:
        return options.marker_topic
    return check_topic_name(f"{options.topic}{MARKER_SUFFIX}.{pipeline}",
                            f"the marker topic of sink kafka:{options.topic}")


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

    @classmethod
    def resources(cls, options: KafkaSinkOptions, pipeline_name: str) -> frozenset[str]:
        """What this sink must have to itself within its pipeline: its marker topic (the output
        topic is shared by design: other sinks and pipelines may write it too)."""
        return frozenset({f"kafka-topic:{marker_topic_of(options, pipeline_name)}"})

    @classmethod
    def check_pipeline(cls, options: KafkaSinkOptions, config: PipelineConfig,
                       output: str) -> None:
        """Refuse, at load time, a pipeline whose largest ``output`` record could outgrow this
        sink's producer limit (``message.max.bytes``): the producer would refuse that record
        on every retry (``MSG_SIZE_TOO_LARGE``) and the pipeline could never commit again."""
        from eos.core.limits import largest_record_bytes

        if options.format == "avro":
            _check_avro(options, config)
        client = {**config.kafka.client, **options.client}
        limit = int(client.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
        largest = largest_record_bytes(config, output)
        if largest > limit:
            raise ValueError(
                f"kafka sink {options.topic}: a record of output '{output}' may reach {largest} "
                f"bytes (string columns hold up to event.max_string_bytes = "
                f"{config.event.max_string_bytes} bytes each, JSON-escaped up to 6x), over the "
                f"producer's message.max.bytes ({limit}): lower event.max_string_bytes, or raise "
                "message.max.bytes in the sink's client settings (and the topic's "
                "max.message.bytes on the broker)")

    def avro_values(self) -> AvroValues | None:
        """The Avro codec of a ``format: avro`` sink (None: JSON values), one per sink object
        (its registry client caches the id and the writer schemas)."""
        if self.options.format != "avro":
            return None
        if getattr(self, "_avro", None) is None:
            registry = _registry(self.options, self.config)
            assert registry is not None  # checked when the config loads
            self._avro = AvroValues(registry, self.options.topic, self.config.name)
        return self._avro

    @property
    def marker_topic(self) -> str:
        """Partition 0 of this topic holds this sink's markers and nothing else."""
        try:
            return marker_topic_of(self.options, self.config.name)
        except ValueError as error:
            raise SinkRejected(f"Kafka sink {self.name}: {error}; name a shorter "
                               "marker_topic") from None

    @property
    def marker_key(self) -> bytes:
        """What identifies this sink's markers: one sink of one pipeline."""
        return f"{self.config.name}/{self.name}".encode()

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
        return self._last_marker(fenced=fence)

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """One Kafka transaction holding N's rows and N's marker; see the module docstring.
        The marker topic's settings were checked before the seal (``check``): after it, only
        transient failures may remain."""
        self._ensure_topics()
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
        # Every value encoded (Avro: its schema registered) before the transaction opens: a
        # registry that is away fails here, transiently, with nothing written. ``check`` did
        # it before the seal when this object checked the same rows.
        keys, values = self._records(epoch, rows)
        try:
            producer.begin_transaction()
            self._produce_rows(producer, headers, keys, values)
            faults.hit("sink.kafka.in_transaction")
            marker = {**self._identity(), "epoch": epoch, "plan_hash": plan_hash,
                      "rows": rows.num_rows, **_line_of(last)}
            self._produce_marker(producer, marker, headers)
            self._commit_transaction(producer)
        except Exception as error:
            return self._after_failed_transaction(producer, epoch, rows.num_rows, error)
        return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)

    def check(self, epoch: int, rows: pa.Table) -> None:
        """Every record of the epoch encoded now (Avro: the value schema registered, which a
        registry refuses for good when it is incompatible) and each within the producer's
        ``message.max.bytes``, and the marker topic not one that deletes records: what would
        otherwise fail every attempt after the seal. The records are kept for ``commit`` on
        this object."""
        check_marker_topic(self._settings(), self.marker_topic)  # MarkerTopicUnsafe
        try:
            keys, values = self._records(epoch, rows)
        except SinkRejected as error:
            raise SinkCannotTake(f"Kafka sink {self.name} cannot take epoch {epoch}: "
                                 f"{error.message}; nothing was sealed or written") from None
        client = {**self.config.kafka.client, **self.options.client}
        limit = int(client.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
        headers = sum(len(k) + len(v) for k, v in self._headers(epoch, "0" * 16))
        sizes = [len(v) + len(k or b"") + headers for k, v in zip(keys, values, strict=True)]
        largest = max(sizes, default=0)
        if largest > limit:
            raise SinkCannotTake(
                f"Kafka sink {self.name} cannot take epoch {epoch}: "
                f"{sum(size > limit for size in sizes)} records exceed the producer's "
                f"message.max.bytes ({limit}; the largest is {largest} bytes); nothing was "
                "sealed or written: raise message.max.bytes in the sink's client settings "
                "(and the topic's max.message.bytes), then run again")

    def _records(self, epoch: int, rows: pa.Table
                 ) -> tuple[list[bytes | None], list[bytes]]:
        """The record keys and values of ``rows`` (values in JSON, or Avro through the
        registry), encoded once per epoch and rows on this object."""
        kept = getattr(self, "_encoded", None)
        if kept is not None and kept[0] == epoch and kept[1] is rows:
            return kept[2], kept[3]
        avro = self.avro_values()
        values = avro.encode(rows) if avro is not None else encode_values(rows)
        keys = encode_keys(rows, self._group())
        self._encoded = (epoch, rows, keys, values)
        return keys, values

    def _group(self) -> list[str]:
        """The fields a record is keyed by: windows and late rows by their group (one group,
        one partition); quarantined records have no group."""
        return list(self.config.group_by) if self.output != "quarantine" else []

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
        marker = {**self._identity(), "epoch": epoch, "rewind": rewind_id,
                  "lineage": rewind_id, "rewinds": rewinds}
        try:
            producer.begin_transaction()
            self._produce_marker(producer, marker)
            self._commit_transaction(producer)
        except Exception as error:
            with contextlib.suppress(Exception):
                producer.abort_transaction(TIMEOUT_S)
            raise SinkUnavailable(f"Kafka sink {self.name}: the rewind marker of epoch {epoch} "
                                  f"did not commit ({error}); rerunning the rewind is safe"
                                  ) from None
        return None

    def current_line(self) -> Callable[[int, str | None], bool]:
        """Whether records of (epoch, lineage header) are on the sink's current line: epochs up
        to its last marker, each of the lineage that published it last (a rewind supersedes
        the records before it). Read unfenced: looking never disturbs a commit."""
        last = self._last_marker_value(fenced=False)
        if last is None:
            return lambda epoch, lineage: False
        top, rewinds = int(last["epoch"]), _line_of(last).get("rewinds", [])
        return lambda epoch, lineage: epoch <= top and lineage == _owner(rewinds, epoch)

    def read_back(self) -> list[dict[str, Any]]:
        """This pipeline's committed rows on the sink's current line, as a ``read_committed``
        consumer sees them, less the records a rewind superseded (``current_line``)."""
        from eos.core.outputs import output_schema

        schema = output_schema(self.config, self.output)
        on_line = self.current_line()
        rows = []
        for record in self._read_topic(self.options.topic):
            if _header(record, "eos-pipeline") != self.config.name:
                continue
            epoch = int(_header(record, "eos-epoch") or NO_EPOCH)
            if on_line(epoch, _header(record, "eos-lineage")):
                avro = self.avro_values()
                rows.append(decode_value(record.value(), schema) if avro is None
                            else avro.decode(record.value(), schema))
        return rows

    def commits(self) -> list[int]:
        """This sink's marker epochs in order (version 2's legacy markers first); a rewind
        marker of N drops the ones after N."""
        epochs: list[int] = []
        for marker in self._all_markers():
            if marker.get("rewind"):
                epochs = [e for e in epochs if e <= marker["epoch"]]
            else:
                epochs.append(marker["epoch"])
        return epochs

    def asset_uri(self) -> str | None:
        """``kafka://<first bootstrap host:port>/<topic>`` of the cluster this sink writes to."""
        from eos.core.lineage import topic_uri

        return topic_uri({**self.config.kafka.client, **self.options.client}, self.options.topic)

    def prepare(self, schema: pa.Schema | None = None) -> None:
        """Create the output topic and the marker topic (compacted) where the broker allows it;
        refuse a marker topic that deletes records (``check_marker_topic``)."""
        self._ensure_topics()
        check_marker_topic(self._settings(), self.marker_topic)

    def _ensure_topics(self) -> None:
        """The output and marker topics exist (created where the broker allows it)."""
        settings = self._settings()
        ensure_topic(settings, self.options.topic, self.options.partitions)
        ensure_topic(settings, self.marker_topic, 1, MARKER_TOPIC_CONFIG)

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

    def _produce_rows(self, producer: ck.Producer, headers: list[tuple[str, bytes]],
                      keys: list[bytes | None], values: list[bytes]) -> None:
        import confluent_kafka as ck

        failures: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        for key, value in zip(keys, values, strict=True):
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

    def _identity(self) -> dict[str, str]:
        """What every marker of this sink says it belongs to (its key says it too)."""
        return {"pipeline": self.config.name, "sink": self.name}

    def _produce_marker(self, producer: ck.Producer, marker: dict[str, Any],
                        headers: list[tuple[str, bytes]] | None = None) -> None:
        """Into partition 0 of this sink's own marker topic, inside the open transaction."""
        producer.produce(self.marker_topic, key=self.marker_key,
                         value=json.dumps(marker, sort_keys=True).encode(), partition=0,
                         headers=headers)

    def _last_marker(self, fenced: bool = True) -> int:
        """The epoch of this sink's last marker (-1 if none)."""
        last = self._last_marker_value(fenced)
        return NO_EPOCH if last is None else int(last["epoch"])

    def _last_marker_value(self, fenced: bool = True) -> dict[str, Any] | None:
        """This sink's last marker, read with ``read_committed``: from its own marker partition,
        else (an upgrade: no marker there yet) from version 2's legacy location.

        ``fenced``: the caller ran ``init_transactions`` and acts on the answer, so the answer
        must be exact: an open transaction holding the partition's LSO back is an error, not a
        stale read (``_require_stable``). Unfenced looks (status, audit) skip that check."""
        last = self._last_in(self.marker_topic, self._own_keys(), fenced, exclusive=True)
        legacy = self.options.legacy_markers
        if last is None and legacy != self.marker_topic:
            # Shared with other pipelines in version 2: not exclusive, but still exact when
            # fenced (the LSO check), for as long as the migration reads it.
            last = self._last_in(legacy, {self.config.name.encode()}, fenced, exclusive=False)
        return last

    def _own_keys(self) -> set[bytes]:
        """Keys allowed in this sink's marker partition: its own, and version 2's (the pipeline
        name) when the partition is also the legacy location (an explicit ``marker_topic``)."""
        keys = {self.marker_key}
        if self.options.legacy_markers == self.marker_topic:
            keys.add(self.config.name.encode())
        return keys

    def _last_in(self, topic: str, keys: set[bytes], fenced: bool,
                 exclusive: bool) -> dict[str, Any] | None:
        """The last marker keyed in ``keys`` in partition 0 of ``topic``: scan backwards from
        its end until one appears. The last one, not the highest: after a rewind the last marker
        says a lower epoch, and it is the truth. ``exclusive``: any other key read is refused."""
        marks = self._watermarks(topic)
        if 0 not in marks:
            return None
        if fenced:
            self._require_stable(topic)
        low, high = marks[0]
        step, end = 64, high
        while end > low:
            start = max(low, end - step)
            records = list(self._read_partition(topic, 0, start))
            if exclusive:
                self._refuse_foreign(topic, records, keys)
            markers = [json.loads(r.value()) for r in records if r.key() in keys]
            if markers:
                return markers[-1]
            end, step = start, step * 4
        return None

    def _all_markers(self) -> list[dict[str, Any]]:
        """Every marker of this sink still in Kafka, oldest first: the legacy location's, then
        its own partition's (one list when both are the same topic)."""
        found: list[dict[str, Any]] = []
        legacy = self.options.legacy_markers
        if legacy != self.marker_topic:
            mine = self.config.name.encode()
            found += [json.loads(r.value()) for r in self._read_markers(legacy) if r.key() == mine]
        keys = self._own_keys()
        records = self._read_markers(self.marker_topic)
        self._refuse_foreign(self.marker_topic, records, keys)
        return found + [json.loads(r.value()) for r in records if r.key() in keys]

    def _read_markers(self, topic: str) -> list[ck.Message]:
        """Every ``read_committed`` record of partition 0 of ``topic`` (none if it is missing)."""
        marks = self._watermarks(topic)
        return list(self._read_partition(topic, 0, marks[0][0])) if 0 in marks else []

    def _refuse_foreign(self, topic: str, records: Iterable[ck.Message],
                        keys: set[bytes]) -> None:
        """This sink's marker partition is its own: a record of anyone else there means its
        answers could depend on another producer's transactions (a config error, permanent)."""
        for record in records:
            if record.key() not in keys:
                who = record.key().decode(errors="replace") if record.key() else "no key"
                raise MarkerTopicShared(
                    f"Kafka sink {self.name}: its marker topic '{topic}' (partition 0) holds a "
                    f"record that is not this sink's marker (key '{who}' at offset "
                    f"{record.offset()}); a marker topic must be written by one sink of one "
                    "pipeline only: give each sink its own marker_topic, or remove marker_topic "
                    f"for the default '<topic>{MARKER_SUFFIX}.<pipeline>'"
                )

    def _require_stable(self, topic: str) -> None:
        """Nothing open holds partition 0 of ``topic`` back, so a ``read_committed`` read sees
        every marker committed before it. After ``init_transactions`` this id has nothing open;
        a gap left is another producer's open transaction (or a newer attempt of this sink that
        fenced this one): a transient error, never a stale answer. A transaction that was just
        ending gets a few short chances to write its markers first."""
        settings = self._settings()
        gap = held_back(settings, topic, 0)
        for _ in range(STABLE_ATTEMPTS - 1):
            if gap is None:
                return
            time.sleep(0.5)
            gap = held_back(settings, topic, 0)
        if gap is None:
            return
        stable, high = gap
        raise SinkUnavailable(
            f"Kafka sink {self.name}: another producer holds an open transaction on the marker "
            f"partition {topic}[0] (last stable offset {stable} < high watermark {high}), so "
            "this sink's last marker cannot be read exactly; retry once it ends. If this "
            "persists, something other than this sink writes to its marker topic"
        )

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


def _registry(options: KafkaSinkOptions, config: PipelineConfig) -> SchemaRegistryConfig | None:
    """The registry an Avro sink registers with: its own, else the event's."""
    return options.schema_registry or config.event.schema_registry


def _check_avro(options: KafkaSinkOptions, config: PipelineConfig) -> None:
    """Load-time refusals of a ``format: avro`` sink: no registry, credentials it cannot read.
    Every output column the grammar allows has an Avro mapping (``kafka_avro.value_schema``;
    ``tests/test_kafka_avro_sink.py`` maps every aggregation of every field type), so the
    columns are not checked here: that needs pyarrow, which the DAG file's parse must not
    import (``tests/test_dags.py``)."""
    registry = _registry(options, config)
    if registry is None:
        raise ValueError(f"kafka sink {options.topic}: format avro needs a Schema Registry: "
                         "give the sink a schema_registry {url, auth_env}, or read an Avro "
                         "event (its event.schema_registry is used)")
    if registry.connection is not None:
        raise ValueError(f"kafka sink {options.topic}: a sink reads the registry's "
                         "credentials from auth_env only (sinks run without Airflow, so not "
                         f"from connection '{registry.connection}'); give the sink a "
                         "schema_registry with auth_env")


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
