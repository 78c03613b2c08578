"""Which transactional id wrote a Kafka sink's last marker, and what a fenced step does about it.

Each marker records the id that wrote it (``transactional_id``; a marker without one was written
by ``eos:<pipeline>:<sink>``, the only id before the prefix was settable). A fenced step
(commit, abort, rewind, the fenced look at the last epoch) compares it with the sink's own id
before it reads the marker exactly:

- the same id: nothing to do;
- the id of ``previous_transactional_id_prefix`` (a declared change of prefix): that id is
  fenced too (``init_transactions`` under it aborts its open transaction, which would otherwise
  hold the partitions' LSO back until the broker's transaction timeout, and fences a zombie of
  it), then the sink goes on under its new id: nothing duplicated, nothing lost, no reader
  stalled; the next marker records the new id. While the option stays, every fenced step
  fences the previous id too (one more ``init_transactions``): remove it once the old
  deployment is gone;
- any other id: ``TransactionalIdChanged``, a permanent error, before anything is written: an
  undeclared change, or another deployment of the pipeline (staging and production with their
  own prefixes) writing the same output and marker topics. Such deployments must write topics
  of their own (or carry different pipeline names); the default marker topic is derived from
  the output topic and the pipeline, so sharing output topics means sharing the marker
  partition, which this refuses. Two deployments that both start from an empty marker
  partition at the same moment can each publish their first epoch before one is refused.
"""

from __future__ import annotations

from typing import Any

from eos.core.errors import TransactionalIdChanged
from eos.sinks.kafka.options import (
    DEFAULT_TRANSACTIONAL_ID_PREFIX,
    KafkaSinkOptions,
    transactional_id,
)
from eos.sinks.kafka.producer import fenced_producer


def previous_id(options: KafkaSinkOptions, pipeline: str, sink: str) -> str | None:
    """The transactional id of the declared previous prefix (None: none declared)."""
    previous = options.previous_transactional_id_prefix
    return None if previous is None else transactional_id(previous, pipeline, sink)


def fence_previous_id(settings: dict[str, Any], options: KafkaSinkOptions, pipeline: str,
                      sink: str) -> None:
    """Fence the declared previous id, if any (its open transaction aborted: a zombie of the
    old deployment holds no LSO back, even after the first marker under the new id)."""
    old = previous_id(options, pipeline, sink)
    if old is not None:
        fenced_producer(settings, old, sink).flush(0)


def last_writer(last: dict[str, Any] | None, pipeline: str, sink: str) -> str | None:
    """The transactional id that wrote the marker ``last`` (None: no marker)."""
    if last is None:
        return None
    return str(last.get("transactional_id") or transactional_id(
        DEFAULT_TRANSACTIONAL_ID_PREFIX, pipeline, sink))


def refuse_foreign_writer(last: dict[str, Any] | None, options: KafkaSinkOptions,
                          pipeline: str, sink: str, marker_topic: str) -> None:
    """``TransactionalIdChanged`` when ``last`` was written under an id that is neither the
    sink's own nor its declared previous one."""
    own = transactional_id(options.transactional_id_prefix, pipeline, sink)
    writer = last_writer(last, pipeline, sink)
    if writer in (None, own, previous_id(options, pipeline, sink)):
        return
    assert writer is not None
    raise TransactionalIdChanged(
        f"Kafka sink {sink}: its last marker (epoch {(last or {}).get('epoch')}) in "
        f"'{marker_topic}' was written under transactional id '{writer}', this sink's "
        f"is '{own}'. If you changed transactional_id_prefix, declare it "
        f"(previous_transactional_id_prefix: {writer.split(':', 1)[0]}) and run again: the "
        "old id is fenced and its open transaction aborted first. If another deployment "
        "of this pipeline writes these topics under its own prefix, give each deployment "
        "its own output topic (or pipeline name). Nothing was written")
