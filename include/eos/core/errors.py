"""Every error the library raises, in one module, split by what a caller should do about it.

The split is the protocol's retry policy (docs/design.md):

- :class:`TransientError`: the world was briefly not as needed (broker down, a server not
  answering, a commit conflict lost to a concurrent attempt). Retrying the same phase is safe
  and is expected to succeed eventually: every phase is idempotent per epoch.
- :class:`PermanentError`: retrying cannot help and may hide the problem (a protocol violation,
  data loss, a bad config, a schema change). The Airflow task fails at once, without retries,
  with this message; a person decides what happens next.

Each message says what failed and what to do about it: it is meant for an operator, not for a
stack-trace reader. Every raise names a specific class below: the base classes cannot be raised
themselves, so no error is left without a retry policy.

An error that crosses a process (a Spark Python worker, spark-submit, a Connect session) travels
as structured data (``to_payload`` / ``from_payload``, or the one-line ``envelope`` inside a
worker's exception text) and is raised again on the caller's side as the same class.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

_ENVELOPE = "EOS-ERROR "  # starts the one line that carries an error out of a Spark worker
_ENVELOPE_LINE = re.compile(re.escape(_ENVELOPE) + r"(\{.*?\})(?=\s*$)", re.M)
_CLASSES: dict[str, type[EosError]] = {}


class EosError(Exception):
    """Base class of every error the library raises on purpose (raise a subclass)."""

    retryable: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _CLASSES[cls.__name__] = cls

    def __init__(self, *args: Any) -> None:
        if type(self) in (EosError, TransientError, PermanentError):
            raise TypeError(f"raise a specific error class, not {type(self).__name__}: "
                            "its retry policy must be stated (eos.core.errors)")
        super().__init__(*args)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def to_payload(self) -> dict[str, Any]:
        """The error as data, for a caller in another process (``from_payload``)."""
        return {"type": type(self).__name__, "message": self.message,
                "retryable": self.retryable}


class TransientError(EosError):
    """Retry the phase: nothing was half-done, and a later attempt is expected to succeed."""

    retryable = True


class PermanentError(EosError):
    """Do not retry: fail the task with this message and let a person decide."""

    retryable = False


class ConfigError(PermanentError):
    """A pipeline config is missing, unreadable or invalid."""


class MissingExtra(ConfigError):
    """What a pipeline or a command asks for needs an optional part of the package that is not
    installed here (``pip install 'eos-pipeline[avro]'``): ``eos.core.extras``."""


class KafkaUnavailable(TransientError):
    """The broker cannot be reached or does not answer in time."""


class ComputeUnavailable(TransientError):
    """The Spark Connect server cannot be reached, refused the token, or lost the session (it
    restarted mid-epoch): nothing was staged; retry once it is back."""


class SparkJobFailed(TransientError):
    """A Spark job of precommit failed (an executor or Python worker died, a task failed):
    nothing was staged; the epoch's inputs are unchanged, so a retry recomputes it."""


class SchemaRegistryUnavailable(TransientError):
    """The Schema Registry a pipeline's ``event.schema_registry`` names did not answer (down,
    slow, refused the credentials, answered 5xx): no record was quarantined for it; retry the
    epoch once it is back (``eos.compute.formats``)."""


class SinkUnavailable(TransientError):
    """A sink cannot be reached or refused a write for a reason that may pass (retry)."""


class TransactionAborted(SinkUnavailable):
    """A sink's transaction was aborted before it committed and its producer cannot go on
    (the broker no longer maps its producer id to its transactional id, a produce failed):
    nothing of it is visible, and a new producer may run the commit again."""


class CommitConflict(TransientError):
    """A fenced commit lost to a concurrent writer and the epoch is still not committed."""


class InjectedFault(TransientError):
    """A fault point armed with ``:fail`` (``eos.core.faults``): a transient failure, for tests."""


class EpochCommitting(TransientError):
    """An epoch's commit has begun (it is sealed) and is not checkpointed yet: a rewind waits
    for it (the commit, or its retry, must finish first)."""


class BrokerUnavailable(TransientError):
    """The embedded broker (a development tool: librdkafka's mock cluster) did not start, or
    librdkafka's mock API refused a request."""


class ComputeNotStarted(TransientError):
    """The Spark Connect server this machine supervises did not start or answer in time."""


class ProduceFailed(TransientError):
    """Records of ``eos produce`` were not acknowledged by the broker (retry the produce)."""


class TopicMissing(PermanentError):
    """The configured source topic does not exist on the broker."""


class SinkRejected(PermanentError):
    """A sink refuses this pipeline's writes for good (authorization, an uncreatable topic)."""


class ExpressionFailed(PermanentError):
    """A ``select``, ``filter`` or derived field fails on a record of the epoch (Spark's ANSI
    mode: a malformed string cast, an overflow, a division by zero). Every attempt computes the
    same rows, so a retry cannot pass: the expression must change (``TRY_CAST``, ``try_add``,
    a ``CASE``), which a pipeline may do between epochs while the column's type stays."""


class SinkCannotTake(PermanentError):
    """A sink proved, before the commit sealed the epoch, that it cannot take the epoch's rows
    (a table whose schema conflicts, a record over its size limit, a schema the registry
    refuses): nothing was sealed or written, so the epoch can still be aborted once the sink
    or the config is fixed (``Sink.check``)."""


class DataLoss(PermanentError):
    """Records an epoch must read are no longer in Kafka (retention, truncation)."""

    @classmethod
    def gone(cls, topic: str, partition: int, start: int, low: int, until: int | None,
             what: str = "range", consequence: str = "they cannot be read") -> DataLoss:
        """Offsets ``[start, low)`` of a range to read were removed (retention, DeleteRecords):
        one wording for every reader (the epoch's, the audit's), naming the offsets."""
        span = f"[{start},{until})" if until is not None else f"[{start},...)"
        return cls(f"topic '{topic}' partition {partition}: offsets [{start},{low}) of the "
                   f"{what} {span} are gone from Kafka (retention); {consequence}")

    @classmethod
    def beyond(cls, topic: str, partition: int, offset: int, high: int,
               what: str = "a read from") -> DataLoss:
        """An offset past the partition's end: the log was truncated or recreated."""
        return cls(f"topic '{topic}' partition {partition}: {what} offset {offset} is beyond the "
                   f"high watermark {high}; the partition was truncated or recreated")


class RewindRefused(PermanentError):
    """A rewind cannot be done as asked (the reason says why and what would work); nothing
    was changed."""


class RewindUnfinished(PermanentError):
    """A rewind was started and not finished: epochs cannot run until it is rerun."""


class TableUnwritable(PermanentError):
    """A table (or the table root) cannot be created where the config says: a path that is not
    writable will not become writable by retrying."""


class ProtocolViolation(PermanentError):
    """The tables contradict the protocol's invariants; never repaired silently."""


class SourceChanged(PermanentError):
    """The configured source (topic, Kafka cluster) is not the one the last checkpoint's
    offsets belong to: planning from them would read the wrong records. Moving a pipeline is
    an operator's decision (``eos move-source``)."""


class TopicVanished(PermanentError):
    """A topic whose offsets the last checkpoint holds, which the config still reads (its
    pattern matches the name), is no longer on the broker: records after those offsets may
    never have been read, and a pipeline does not skip them silently."""


class FillRefused(PermanentError):
    """``eos fill`` cannot fill the sink (nothing to fill, a sink type that cannot be filled,
    no sink that holds the epochs); nothing was written."""


class MoveRefused(PermanentError):
    """``eos move-source`` cannot move the pipeline as asked (the reason says why and what
    would work); nothing was changed."""


class TimeLookupWrong(PermanentError):
    """The broker's offsets for a timestamp disagree with its records (it does not implement
    Kafka's ListOffsets by timestamp): a start or move by time would skip records, so none is
    planned."""


class StartRefused(ConfigError):
    """A new pipeline's ``kafka.start`` names offsets its topic does not have (partitions it
    lacks, offsets outside the log): nothing was planned; the config must say where to start."""


# Exit codes of the ``eos`` command and the precommit Spark app, so that a caller that only
# sees a process (SparkSubmitOperator, a shell) can apply the same retry policy.
EXIT_PERMANENT = 2
EXIT_TRANSIENT = 75  # EX_TEMPFAIL in sysexits.h: "try again later"


def is_permanent(error: BaseException) -> bool:
    """Whether a retry must not be attempted (anything not ours is treated as transient)."""
    return isinstance(error, EosError) and not error.retryable


def exit_code(error: BaseException) -> int:
    return EXIT_PERMANENT if is_permanent(error) else EXIT_TRANSIENT


def from_payload(payload: dict[str, Any]) -> EosError:
    """The error ``to_payload`` described, as its own class again. A class this version does not
    know keeps the retry policy the payload states."""
    cls = _CLASSES.get(str(payload.get("type")))
    if cls is None or cls in (EosError, TransientError, PermanentError):
        cls = UnknownTransient if payload.get("retryable", True) else UnknownPermanent
    return cls(str(payload.get("message", "")))


class UnknownTransient(TransientError):
    """An error from another process whose class this process does not know (retryable)."""


class UnknownPermanent(PermanentError):
    """An error from another process whose class this process does not know (not retryable)."""


def envelope(error: EosError) -> str:
    """The one line that carries ``error`` out of a Spark Python worker: Spark reaches the
    driver with the worker's exception text only, so the error travels in it as JSON."""
    return _ENVELOPE + json.dumps(error.to_payload(), separators=(",", ":"))


def carried(text: str) -> EosError | None:
    """The error an ``envelope`` line inside ``text`` carries (the last one), if any."""
    found = _ENVELOPE_LINE.findall(text)
    if not found:
        return None
    try:
        return from_payload(json.loads(found[-1]))
    except ValueError:
        return None


def describe_failure(error: BaseException) -> str:
    """The operator's message of a failed Spark job: the carried library error, else the
    gRPC status and details (Spark Connect), else the first line."""
    inner = carried(str(error))
    if inner is not None:
        return f"{type(inner).__name__}: {inner.message}"
    lines = [line.strip() for line in str(error).strip().splitlines()]
    grpc = [line for line in lines if line.startswith(("status = ", "details = "))]
    return f"{type(error).__name__}: {' '.join(grpc) if grpc else (lines[0] if lines else '')}"


class MarkerTopicShared(ConfigError):
    """A Kafka sink's marker partition holds a record that is not this sink's marker: another
    sink or pipeline writes there, so this sink's "already committed?" answer could depend on
    another producer's transactions. Give each sink a marker topic of its own."""


class TransactionalIdChanged(MarkerTopicShared):
    """A Kafka sink's last marker was written under another transactional id than the sink's
    own: its ``transactional_id_prefix`` changed, or another deployment of the pipeline writes
    the same topics under its own prefix. Refused until the change is declared
    (``previous_transactional_id_prefix``) or the deployments are separated."""


class StoreUnsafe(ConfigError):
    """Tables would live where two writers can commit the same Delta version (an unsafe storage
    setting, or a store that does not enforce put-if-absent): the commit fence would not hold
    (``eos.core.storage``)."""


class StoreUnavailable(TransientError):
    """The embedded object store (a development tool: SeaweedFS's S3 gateway) did not start,
    or is not running when asked for."""


class MarkerTopicUnsafe(ConfigError):
    """A Kafka sink's marker topic deletes records by time or size (``cleanup.policy`` with
    ``delete`` and a finite ``retention.ms`` or ``retention.bytes``): its markers would be lost,
    and with them the sink's committed epoch, which halts the pipeline. Make it compacted."""


class TableOwned(ConfigError):
    """A sink table records other writers (pipelines) and this pipeline may not join them: the
    table is not declared shared by all of them (``eos.core.ownership``). Two unshared writers
    of one table would undo each other's epochs on a rewind."""
