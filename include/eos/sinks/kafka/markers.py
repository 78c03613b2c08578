"""A Kafka sink's marker log: the record, in a partition of its own, of each epoch it committed.

A marker identifies **one sink of one pipeline**: its key is ``<pipeline>/<sink name>``
(``clicks_to_kafka/kafka:clicks-per-minute``) and its value names both (``pipeline``, ``sink``),
so sinks of one pipeline (windows, late, quarantine) never read each other's epochs. Reading the
last marker must never depend on another producer: a ``read_committed`` read stops at the
partition's last stable offset (LSO), and any producer's open transaction holds the LSO back, so
on a partition others write to, a crash between this sink's Kafka commit and the checkpoint
could read N-1 on the retry and publish N twice. Hence each sink's markers live in a partition
**only this sink's transactional id writes**: partition 0 of ``<topic>.eos-markers.<pipeline>``
(the output topic and the pipeline name identify the sink: its name is ``kafka:<topic>``, unique
per pipeline), or of ``marker_topic`` when given, which then means "exclusive to this sink".
After ``init_transactions`` no transaction of this id is open, so nothing holds that partition's
LSO back and the read is exact. The exclusivity is claimed at load time (``KafkaSink.resources``:
two sinks of one pipeline naming one marker topic are refused) and defended whenever a fenced
attempt reads its markers:

- a record there that is not this sink's marker (another sink or pipeline writes there):
  ``MarkerTopicShared``, a config error, never an answer;
- an LSO below the high watermark (another producer holds an open transaction there): a
  transient ``SinkUnavailable`` naming it, never an answer (the retry reads again).

Only the tail of the partition is read for the answer (its last marker of this sink), so a
foreign record is found when it is among the records read, which always includes the newest.

Migration from the markers of version 2 (key = the pipeline name, in the shared
``<topic>.eos-markers`` or in ``marker_topic``): while the new location holds no marker of this
sink, its last marker is read from that legacy location, so an upgrade neither republishes nor
refuses; the next commit writes into the new location. ``history()`` lists the legacy markers
first. A legacy marker in an explicit ``marker_topic`` is not a foreign record.

``eos fill`` (``eos.sinks.kafka.fill``) writes markers of its own into the same partition, keyed
``<pipeline>/<sink name>#fill`` (``fill_key``): not foreign records, and never this sink's
markers (``last``, ``history`` read the pipeline's alone); ``last_fill`` reads the last one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from eos.core.errors import MarkerTopicShared, SinkUnavailable
from eos.core.outcomes import NO_EPOCH
from eos.sinks.kafka.read_back import partition_records, watermarks
from eos.sinks.kafka.topics import held_back

if TYPE_CHECKING:
    import confluent_kafka as ck

MARKER_SUFFIX = ".eos-markers"
FILL_SUFFIX = "#fill"  # a fill's marker key and transactional id: the sink's, with this suffix
STABLE_ATTEMPTS = 3  # LSO checks before an open foreign transaction is reported (0.5 s apart)


class MarkerLog:
    """The markers of one sink of one pipeline: written inside the sink's transactions, read
    with ``read_committed`` from partition 0 of ``topic`` (this sink's alone), else from version
    2's ``legacy`` location while the sink's own partition holds none."""

    def __init__(self, topic: str, legacy: str, pipeline: str, sink: str,
                 settings: dict[str, Any], writer: str | None = None) -> None:
        self.topic = topic
        self.writer = writer
        self.legacy = legacy
        self.pipeline = pipeline
        self.sink = sink
        self.settings = settings

    @property
    def key(self) -> bytes:
        """What identifies this sink's markers: one sink of one pipeline."""
        return f"{self.pipeline}/{self.sink}".encode()

    @property
    def fill_key(self) -> bytes:
        """What identifies the markers of ``eos fill`` into this sink (beside its own)."""
        return f"{self.pipeline}/{self.sink}{FILL_SUFFIX}".encode()

    def identity(self) -> dict[str, str]:
        """What every marker of this sink says it belongs to (its key says it too)."""
        return {"pipeline": self.pipeline, "sink": self.sink}

    def write(self, producer: ck.Producer, fields: dict[str, Any],
              headers: list[tuple[str, bytes]] | None = None, fill: str | None = None) -> None:
        """A marker of ``fields`` (and the sink's identity, and ``writer``: the transactional id
        that writes it) into partition 0 of this sink's own marker topic, inside the open
        transaction. ``fill``: a fill's marker (``fill_key``), written by that transactional
        id."""
        marker = {**self.identity(), **fields}
        writer = fill or self.writer
        if writer is not None:
            marker["transactional_id"] = writer
        producer.produce(self.topic, key=self.key if fill is None else self.fill_key,
                         value=json.dumps(marker, sort_keys=True).encode(), partition=0,
                         headers=headers)

    def last_epoch(self, fenced: bool = True) -> int:
        """The epoch of this sink's last marker (-1 if none)."""
        last = self.last(fenced)
        return NO_EPOCH if last is None else int(last["epoch"])

    def last(self, fenced: bool = True) -> dict[str, Any] | None:
        """This sink's last marker, read with ``read_committed``: from its own marker partition,
        else (an upgrade: no marker there yet) from version 2's legacy location.

        ``fenced``: the caller ran ``init_transactions`` and acts on the answer, so the answer
        must be exact: an open transaction holding the partition's LSO back is an error, not a
        stale read (``_require_stable``). Unfenced looks (status, audit) skip that check."""
        last = self._last_in(self.topic, self._own_keys(), fenced, exclusive=True)
        if last is None and self.legacy != self.topic:
            # Shared with other pipelines in version 2: not exclusive, but still exact when
            # fenced (the LSO check), for as long as the migration reads it.
            last = self._last_in(self.legacy, {self.pipeline.encode()}, fenced, exclusive=False)
        return last

    def last_fill(self, fenced: bool = True) -> dict[str, Any] | None:
        """The last marker of ``eos fill`` into this sink (None: none), read as ``last`` reads
        the sink's own (``fenced``: exact, or an error)."""
        return self._last_in(self.topic, {self.fill_key}, fenced, exclusive=True)

    def history(self) -> list[dict[str, Any]]:
        """Every marker of this sink still in Kafka, oldest first: the legacy location's, then
        its own partition's (one list when both are the same topic)."""
        found: list[dict[str, Any]] = []
        if self.legacy != self.topic:
            mine = self.pipeline.encode()
            found += [json.loads(r.value()) for r in self._read_all(self.legacy)
                      if r.key() == mine]
        keys = self._own_keys()
        records = self._read_all(self.topic)
        self._refuse_foreign(self.topic, records, keys | {self.fill_key})
        return found + [json.loads(r.value()) for r in records if r.key() in keys]

    def _own_keys(self) -> set[bytes]:
        """Keys allowed in this sink's marker partition: its own, and version 2's (the pipeline
        name) when the partition is also the legacy location (an explicit ``marker_topic``)."""
        keys = {self.key}
        if self.legacy == self.topic:
            keys.add(self.pipeline.encode())
        return keys

    def _last_in(self, topic: str, keys: set[bytes], fenced: bool,
                 exclusive: bool) -> dict[str, Any] | None:
        """The last marker keyed in ``keys`` in partition 0 of ``topic``: scan backwards from
        its end until one appears. The last one, not the highest: after a rewind the last marker
        says a lower epoch, and it is the truth. ``exclusive``: any other key read is refused."""
        marks = watermarks(self.settings, topic)
        if 0 not in marks:
            return None
        if fenced:
            self._require_stable(topic)
        low, high = marks[0]
        step, end = 64, high
        while end > low:
            start = max(low, end - step)
            records = list(partition_records(self.settings, topic, 0, start, self.pipeline))
            if exclusive:
                self._refuse_foreign(topic, records, self._own_keys() | {self.fill_key})
            markers = [json.loads(r.value()) for r in records if r.key() in keys]
            if markers:
                return markers[-1]
            end, step = start, step * 4
        return None

    def _read_all(self, topic: str) -> list[ck.Message]:
        """Every ``read_committed`` record of partition 0 of ``topic`` (none if it is missing)."""
        marks = watermarks(self.settings, topic)
        return (list(partition_records(self.settings, topic, 0, marks[0][0], self.pipeline))
                if 0 in marks else [])

    def _refuse_foreign(self, topic: str, records: Iterable[ck.Message],
                        keys: set[bytes]) -> None:
        """This sink's marker partition is its own: a record of anyone else there means its
        answers could depend on another producer's transactions (a config error, permanent)."""
        for record in records:
            if record.key() not in keys:
                who = record.key().decode(errors="replace") if record.key() else "no key"
                raise MarkerTopicShared(
                    f"Kafka sink {self.sink}: its marker topic '{topic}' (partition 0) holds a "
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
        gap = held_back(self.settings, topic, 0)
        for _ in range(STABLE_ATTEMPTS - 1):
            if gap is None:
                return
            time.sleep(0.5)
            gap = held_back(self.settings, topic, 0)
        if gap is None:
            return
        stable, high = gap
        raise SinkUnavailable(
            f"Kafka sink {self.sink}: another producer holds an open transaction on the marker "
            f"partition {topic}[0] (last stable offset {stable} < high watermark {high}), so "
            "this sink's last marker cannot be read exactly; retry once it ends. If this "
            "persists, something other than this sink writes to its marker topic"
        )
