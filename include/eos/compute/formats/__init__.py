"""Input formats: how a Kafka record's value becomes the pipeline's declared event.

``event.format`` names one module of this package; each has ``parser(event) -> EventParser``
and nothing else is needed to add one (the list is ``FORMATS``). The contract, whatever the
bytes look like:

* ``parse(raw, kafka_ts_ms)`` gives ``Parsed`` (event time in ms, the declared fields in
  order, typed) or ``Rejected`` (the quarantine reason); ``parse_batch`` does the same for an
  Arrow batch of raw records (``eos.compute.reader.RAW_SCHEMA``), one row each in
  ``eos.core.schema.parsed_schema``. Both give a record the same outcome and reason.
* A record's outcome depends only on its bytes and Kafka timestamp (and, for a Schema Registry
  format, the writer schema its id names): a rerun stages identical rows. The one exception is
  an id the registry does not know yet: quarantined in that batch, asked again in the next
  (``eos.compute.formats.registry`` says which attempt's answer an epoch commits).
* A record that cannot be an event is quarantined, never dropped; a dependency that is away
  (a Schema Registry) is a ``TransientError`` and quarantines nothing.

``json`` is the specialised parser of ``eos.compute.formats.json``. A Schema Registry format
supplies a ``RecordDecoder`` (bytes -> a decoded record) and ``eos.compute.formats.records``
applies the declared fields to it with the same rules and reasons as JSON's.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from importlib import import_module
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from eos.core.config import EventConfig
from eos.core.extras import require_format

FORMATS = {"json": "eos.compute.formats.json", "avro": "eos.compute.formats.avro",
           "protobuf": "eos.compute.formats.protobuf",
           "json_schema": "eos.compute.formats.json_schema"}
REASON_CHARS = 200  # a malformed-JSON message is cut to this


class Parsed(NamedTuple):
    event_ms: int
    values: tuple  # in the declared order of event.fields; None for an absent optional field


class Rejected(NamedTuple):
    reason: str


class EventParser(Protocol):
    """What the reader (and the audit) need of a format, compiled once per worker."""

    schema: pa.Schema

    def parse(self, raw: bytes | None, kafka_ts_ms: int | None) -> Parsed | Rejected: ...

    def parse_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...


class Decoded(NamedTuple):
    """A decoded record (nested dicts of Python values) and what to call its writer schema in
    a reason (``schema id 7``)."""

    record: dict[str, Any]
    where: str


class RecordDecoder(Protocol):
    """Bytes of one record value -> the decoded record, or why it cannot be decoded."""

    def decode(self, raw: bytes) -> Decoded | Rejected: ...

    def new_batch(self) -> None:
        """Called before each batch: forget what holds only for a while (an id the Schema
        Registry did not know), so a batch's records share one answer and the next asks again."""


def parser_for(event: EventConfig) -> EventParser:
    """The compiled parser of ``event.format`` (the format module's ``parser``)."""
    require_format(event.format)
    module: Any = import_module(FORMATS[event.format])
    parser: EventParser = module.parser(event)
    return parser


def without_gc(parse: Callable[[pa.RecordBatch], pa.RecordBatch],
               batch: pa.RecordBatch) -> pa.RecordBatch:
    """``parse(batch)`` with Python's cycle collector off: a parsed batch makes no cycles, so
    collections triggered by its millions of new objects would only rescan them."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parse(batch)
    finally:
        if collecting:
            gc.enable()
