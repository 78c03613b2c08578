"""Transactional Kafka sink (docs/pipelines.md, "Sinks"): Kafka -> windows -> Kafka, exactly once.

One fixed ``transactional.id`` per pipeline and sink, ``<prefix>:<pipeline>:<sink>``
(``transactional_id_prefix``, default ``eos``). ``commit(N)``:

1. ``init_transactions()``: fences every earlier producer with this id (a zombie attempt can no
   longer commit) and aborts its pending transaction, if any (``eos.sinks.kafka.producer``);
   when the last marker was written under another id, see "Transactional ids" below;
2. read this sink's last committed epoch marker with ``isolation.level=read_committed``;
3. skip if it is ``>= N``;
4. ``begin_transaction`` -> produce N's rows to the topic and N's marker to the marker topic ->
   ``commit_transaction``.

Rows and marker are one transaction, so a ``read_committed`` consumer sees both or neither, and
the marker tells every later attempt that N is done. The whole transaction lives inside one
call, so Flink's failure mode (a transaction pre-committed in one checkpoint, committed in a
later one, expired by ``transaction.timeout.ms`` in between: data loss) cannot happen here: a
transaction that times out was never reported committed, and the retry redoes it.

Markers (``eos.sinks.kafka.markers``): each names one sink of one pipeline and lives in a
partition only this sink's transactional id writes, so step 2 never depends on another
producer (the marker log refuses a shared marker topic and an open foreign transaction); the
marker log also reads version 2's markers while a sink migrates from them.

Records (``eos.sinks.records``): key = the group fields as compact JSON with sorted keys;
value = a JSON object of the output columns (``format: avro``: the Schema Registry wire format,
``eos.sinks.kafka.avro``, its schema registered before the transaction opens); headers
``eos-pipeline``, ``eos-epoch``, ``eos-plan-hash``, and ``eos-lineage`` after a rewind. Topics
are made to exist by ``eos.sinks.kafka.topics``. Consumers must read with
``isolation.level=read_committed``.

Rewinds (``eos.core.rewind``): published records cannot be withdrawn, so a rewind to N writes
only a marker saying N (carrying the rewind's id); the replay republishes epochs N+1.. under the
rewind's lineage (``eos.sinks.kafka.lineage``). The audit reads the current line back
(``eos.sinks.kafka.read_back``).

Transactional ids (``eos.sinks.kafka.transactional_ids``): each marker records the id that
wrote it. A fenced step compares it with the sink's own id before it reads the marker exactly:
the same id goes on; the id of a declared ``previous_transactional_id_prefix`` is fenced too
(its open transaction aborted), then the sink goes on under its new id; any other id is
refused (``TransactionalIdChanged``) before anything is written. Records too large for the
producer and missing rights are refused before the seal (``eos.sinks.kafka.checks``).

What the embedded broker (librdkafka's mock cluster) does not do (docs/guarantees.md): fence
transactional ids and filter ``read_committed`` (its LSO is always the high watermark). On it,
steps 1 and 4 still run and the happy path, the skip after a marker and crashes outside a
transaction behave as on Kafka; a crash inside a transaction, two concurrent attempts and the
LSO defence are only exercised on a real broker.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eos.core import faults
from eos.core.errors import SinkCannotTake, SinkRejected, SinkUnavailable, TransactionAborted
from eos.core.extras import require_format
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import (
    SinkCommit,
    SupportsAssets,
    SupportsFill,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)
from eos.sinks.kafka import lineage as kafka_lineage
from eos.sinks.kafka.avro import AvroValues
from eos.sinks.kafka.checks import (
    check_largest_record,
    check_record_sizes,
    check_topic_rights,
    producer_limit,
)
from eos.sinks.kafka.markers import MarkerLog
from eos.sinks.kafka.options import (
    KafkaSinkOptions,
    check_avro,
    check_record_columns,
    marker_topic_of,
    registry_of,
    transactional_id,
)
from eos.sinks.kafka.producer import (
    after_failed_transaction,
    commit_transaction,
    fenced_producer,
    produce_rows,
)
from eos.sinks.kafka.read_back import rows_on_line, topic_records
from eos.sinks.kafka.topics import MARKER_TOPIC_CONFIG, TIMEOUT_S, check_marker_topic, ensure_topic
from eos.sinks.kafka.transactional_ids import fence_previous_id, refuse_foreign_writer
from eos.sinks.records import (
    Headers,
    column_bytes,
    decode_value,
    encode_keys,
    encode_values,
    eos_headers,
    record_headers,
    value_columns,
)

if TYPE_CHECKING:
    import confluent_kafka as ck
    import pyarrow as pa

    from eos.core.config import PipelineConfig

log = logging.getLogger(__name__)


class KafkaSink(SupportsRewind, SupportsReadBack, SupportsFill, SupportsAssets):
    kind = "kafka"
    withdraws = False  # a published record stays published: rewinds republish
    options: KafkaSinkOptions
    # The producer ``check`` initialised (proving the transactional id may be used), taken by
    # the commit that follows on this object.
    _checked_producer: ck.Producer | None = None

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
    def topics_written(cls, options: KafkaSinkOptions, pipeline_name: str) -> frozenset[str]:
        return frozenset({options.topic, marker_topic_of(options, pipeline_name)})

    @classmethod
    def check_pipeline(cls, options: KafkaSinkOptions, config: PipelineConfig,
                       output: str) -> None:
        """Refuse, at load time, a pipeline whose largest ``output`` record could outgrow this
        sink's producer limit (``message.max.bytes``): the producer would refuse that record
        on every retry (``MSG_SIZE_TOO_LARGE``) and the pipeline could never commit again."""
        check_record_columns(options, config, output)
        if options.format == "avro":
            require_format("avro", "a Kafka sink's format")
            check_avro(options, config)
        check_largest_record(options, config, output)

    def avro_values(self) -> AvroValues | None:
        """The Avro codec of a ``format: avro`` sink (None: JSON values), one per sink object
        (its registry client caches the id and the writer schemas)."""
        if self.options.format != "avro":
            return None
        if getattr(self, "_avro", None) is None:
            registry = registry_of(self.options, self.config)
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
    def transactional_id(self) -> str:
        """Fixed per pipeline, sink and prefix: the broker fences older producers by this id."""
        return transactional_id(self.options.transactional_id_prefix, self.config.name,
                                self.name)

    def markers(self) -> MarkerLog:
        """This sink's marker log, with the client settings as they are now."""
        return MarkerLog(topic=self.marker_topic, legacy=self.options.legacy_markers,
                         pipeline=self.config.name, sink=self.name, settings=self._settings(),
                         writer=self.transactional_id)

    def _settings(self) -> dict[str, Any]:
        from eos.core.kafka import client_settings

        return client_settings({**self.config.kafka.client, **self.options.client})

    # -- the contract -------------------------------------------------------------------------

    def committed_epoch(self, fence: bool = True) -> int:
        """Fence earlier producers of this sink (``init_transactions``), then read the marker."""
        if not fence:
            return self.markers().last_epoch(fenced=False)
        _, last = self._fenced_producer_and_last()
        return NO_EPOCH if last is None else int(last["epoch"])

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """One Kafka transaction holding N's rows and N's marker; see the module docstring.
        The marker topic's settings were checked before the seal (``check``): after it, only
        transient failures may remain.

        A transaction aborted under its producer (``TransactionAborted``) is run once more at
        once by a new producer, from its ``init_transactions`` on: an aborted transaction ends
        its producer's usefulness when librdkafka cannot bump the producer's epoch (a producer
        id the broker no longer maps to this transactional id: expired on Kafka, or, on the
        embedded mock cluster, drawn at random equal to another producer's), and the rerun is
        the same idempotent commit a retried task would run. A fenced producer (another
        attempt took over) is not run again: that attempt goes on."""
        try:
            return self._commit_once(epoch, rows, plan_hash)
        except TransactionAborted as error:
            log.warning("Kafka sink %s: the transaction of epoch %d was aborted (%s); "
                        "committing it again with a new producer", self.name, epoch,
                        error.message)
            return self._commit_once(epoch, rows, plan_hash)

    def _commit_once(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """``commit`` by one producer."""
        self._ensure_topics()
        producer, last = self._fenced_producer_and_last()
        markers = self.markers()
        held = NO_EPOCH if last is None else int(last["epoch"])
        if held >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
        if not self.follows(held, epoch):
            from eos.core.errors import ProtocolViolation

            raise ProtocolViolation(
                f"Kafka sink {self.name} holds epoch {held}; it cannot receive epoch {epoch} "
                "(epochs are committed in order)"
            )
        faults.hit("sink.before_write")
        faults.hit("sink.kafka.before_write")
        line = kafka_lineage.line_of(last)
        headers = eos_headers(self.config.name, epoch, plan_hash, line.get("lineage"))
        # Every value encoded (Avro: its schema registered) before the transaction opens: a
        # registry that is away fails here, transiently, with nothing written. ``check`` did
        # it before the seal when this object checked the same rows.
        keys, values, own = self._records(epoch, rows)
        try:
            producer.begin_transaction()
            produce_rows(producer, self.options.topic, self.name, headers, keys, values, own)
            faults.hit("sink.kafka.in_transaction")
            markers.write(producer, {"epoch": epoch, "plan_hash": plan_hash,
                                     "rows": rows.num_rows, **line}, headers)
            commit_transaction(producer)
        except Exception as error:
            return after_failed_transaction(producer, error, self.name, epoch, rows.num_rows,
                                            markers.last_epoch)
        return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)

    def check(self, epoch: int, rows: pa.Table) -> None:
        """Every record of the epoch encoded now (Avro: the value schema registered, which a
        registry refuses for good when it is incompatible) and each within the producer's
        ``message.max.bytes``, the marker topic not one that deletes records, and this
        principal allowed what the commit does (``_check_authorized``): what would otherwise
        fail every attempt after the seal. The records, and the producer, are kept for
        ``commit`` on this object."""
        try:
            keys, values, own = self._records(epoch, rows)
        except SinkRejected as error:
            raise SinkCannotTake(f"Kafka sink {self.name} cannot take epoch {epoch}: "
                                 f"{error.message}; nothing was sealed or written") from None
        # eos's headers at their largest: a plan hash, and the lineage header of a line a
        # rewind started (which line the commit is on is read only then).
        eos = eos_headers(self.config.name, epoch, "0" * 16,
                          "0" * kafka_lineage.LONGEST_LINEAGE)
        check_record_sizes(self.name, epoch, producer_limit(self.options, self.config), eos,
                           keys, values, own)
        # What the broker says last: the records' own faults need no broker to be found.
        check_marker_topic(self._settings(), self.marker_topic)  # MarkerTopicUnsafe
        self._check_authorized(epoch)

    def _check_authorized(self, epoch: int) -> None:
        """The broker lets this principal write the output topic, read and write the marker
        topic, and use the sink's transactional id: else every attempt after the seal would be
        refused. The topics' rights come from DescribeTopics; a transactional id's can only be
        learnt by using it, so the commit's producer is initialised here (fencing earlier
        producers of the id, as the commit's own ``init_transactions`` would) and kept for the
        commit that follows on this object."""
        check_topic_rights(self._settings(), self.name, epoch, self.options.topic,
                           self.marker_topic)
        try:
            self._checked_producer = fenced_producer(self._settings(), self.transactional_id,
                                                     self.name)
        except SinkRejected as error:
            raise SinkCannotTake(f"{error.message}; nothing was sealed or written") from None

    def _records(self, epoch: int, rows: pa.Table
                 ) -> tuple[list[bytes | None], list[bytes], list[Headers]]:
        """The record keys, values and own headers of ``rows`` (values in JSON, or Avro
        through the registry), encoded once per epoch and rows on this object."""
        kept = getattr(self, "_encoded", None)
        if kept is not None and kept[0] == epoch and kept[1] is rows:
            return kept[2], kept[3], kept[4]
        avro = self.avro_values()
        shown = value_columns(rows)
        values = avro.encode(shown) if avro is not None else encode_values(shown)
        if self.options.key is not None:
            keys = column_bytes(rows, self._source("key", self.options.key))
        else:
            keys = encode_keys(rows, self._group())
        wanted = self.options.headers
        own = (record_headers(rows, wanted.carry,
                              {name: self._source(f"header:{name}", text)
                               for name, text in wanted.set.items()})
               if wanted is not None else [[]] * rows.num_rows)  # shared, never changed
        self._encoded = (epoch, rows, keys, values, own)
        return keys, values, own

    def _source(self, role: str, text: str) -> str:
        """The column of the rows holding ``role``'s bytes: ``text`` itself when it names a
        column, else the record column Spark computed from the expression with the row."""
        return self.config.record_column(self.name, role) or text

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
        markers = self.markers()
        last = markers.last()
        if last is not None and last.get("rewind") == rewind_id:
            return None
        fields = kafka_lineage.rewind_fields(last, epoch, rewind_id)
        try:
            producer.begin_transaction()
            markers.write(producer, fields)
            commit_transaction(producer)
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
        return kafka_lineage.current_line(self.markers().last(fenced=False))

    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        """This pipeline's committed rows of epoch ``since`` or later on the sink's current
        line, as a ``read_committed`` consumer sees them, less the records a rewind superseded
        (``current_line``). The topic is read through once; earlier epochs' records are
        dropped as they come, undecoded."""
        from eos.core.outputs import output_schema

        schema = output_schema(self.config, self.output)
        on_line = self.current_line()
        records = topic_records(self._settings(), self.options.topic, self.config.name)
        return rows_on_line(records, self.config.name,
                            lambda epoch, lineage: epoch >= since and on_line(epoch, lineage),
                            lambda raw: self._decode(raw, schema))

    def _decode(self, raw: bytes, schema: pa.Schema) -> dict[str, Any]:
        """A record value of this sink as the row it encodes (JSON, or Avro)."""
        avro = self.avro_values()
        return decode_value(raw, schema) if avro is None else avro.decode(raw, schema)

    def commits(self) -> list[int]:
        """This sink's marker epochs in order (version 2's legacy markers first); a rewind
        marker of N drops the ones after N."""
        return kafka_lineage.committed_epochs(self.markers().history())

    def filled(self) -> tuple[int, int] | None:
        from eos.sinks.kafka.fill import filled

        return filled(self)

    def fill(self, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
        """One transaction of its own per filled epoch (``eos.sinks.kafka.fill``)."""
        from eos.sinks.kafka.fill import fill

        return fill(self, epoch, rows, first)

    def asset_unnamed(self) -> str:
        return "no Kafka broker is configured in this process to name it"

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
        """This sink's producer after ``init_transactions``, and the id that wrote the last
        marker fenced too when it was the declared previous one
        (``eos.sinks.kafka.transactional_ids``)."""
        producer = fenced_producer(self._settings(), self.transactional_id, self.name)
        self._take_over()
        return producer

    def _fenced_producer_and_last(self) -> tuple[ck.Producer, dict[str, Any] | None]:
        """``_fenced_producer``, then the last marker read fenced (exact): what a commit acts
        on. Without a declared previous id, the writer check reads that same marker (one read
        where there were two). With one, the old id is fenced before the exact read: its
        zombie's open transaction would hold the marker partition back and fail that read
        until the transaction timed out."""
        if self.options.previous_transactional_id_prefix is not None:
            producer = self._fenced_producer()
            return producer, self.markers().last()
        producer = self._checked_producer or fenced_producer(
            self._settings(), self.transactional_id, self.name)
        self._checked_producer = None  # one transaction's producer: a rerun makes a new one
        try:
            last = self.markers().last()
        except SinkUnavailable:
            # Held back by an open transaction: if another deployment writes here, say so
            # (permanent) rather than retrying while it writes.
            self._refuse_foreign_writer(self.markers().last(fenced=False))
            raise
        self._refuse_foreign_writer(last)
        return producer, last

    def _take_over(self) -> None:
        """Refuse a last marker of a foreign writer (``_refuse_foreign_writer``); fence a
        declared previous id every time (its open transaction aborted: a zombie of the old
        deployment holds no LSO back, even after the first marker under the new id)."""
        self._refuse_foreign_writer(self.markers().last(fenced=False))
        fence_previous_id(self._settings(), self.options, self.config.name, self.name)

    def _refuse_foreign_writer(self, last: dict[str, Any] | None) -> None:
        refuse_foreign_writer(last, self.options, self.config.name, self.name,
                              self.marker_topic)
