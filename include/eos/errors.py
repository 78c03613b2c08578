"""Every error the library raises, in one module, split by what a caller should do about it.

The split is the protocol's retry policy (DESIGN §5):

- :class:`TransientError`: the world was briefly not as needed (broker down, a server not
  answering, a commit conflict lost to a concurrent attempt). Retrying the same phase is safe
  and is expected to succeed eventually: every phase is idempotent per epoch.
- :class:`PermanentError`: retrying cannot help and may hide the problem (a protocol violation,
  data loss, a bad config, a schema change). The Airflow task fails at once, without retries,
  with this message; a person decides what happens next.

Each message says what failed and what to do about it: it is meant for an operator, not for a
stack-trace reader.
"""

import re

_WRAPPED = re.compile(r"eos\.errors\.(\w+): (.+)")


class EosError(Exception):
    """Base class of every error the library raises on purpose."""


class TransientError(EosError):
    """Retry the phase: nothing was half-done, and a later attempt is expected to succeed."""


class PermanentError(EosError):
    """Do not retry: fail the task with this message and let a person decide."""


class ConfigError(PermanentError):
    """A pipeline config is missing, unreadable or invalid."""


class KafkaUnavailable(TransientError):
    """The broker cannot be reached or does not answer in time."""


class ComputeUnavailable(TransientError):
    """The Spark Connect server cannot be reached, refused the token, or lost the session (it
    restarted mid-epoch): nothing was staged; retry once it is back."""


class SparkJobFailed(TransientError):
    """A Spark job of precommit failed (an executor or Python worker died, a task failed):
    nothing was staged; the epoch's inputs are unchanged, so a retry recomputes it."""


class SinkUnavailable(TransientError):
    """A sink cannot be reached or refused a write for a reason that may pass (retry)."""


class CommitConflict(TransientError):
    """A fenced commit lost to a concurrent writer and the epoch is still not committed."""


class InjectedFault(TransientError):
    """A fault point armed with ``:fail`` (``eos.faults``): a transient failure, for tests."""


class TopicMissing(PermanentError):
    """The configured source topic does not exist on the broker."""


class SinkRejected(PermanentError):
    """A sink refuses this pipeline's writes for good (authorization, an uncreatable topic)."""


class DataLoss(PermanentError):
    """Records an epoch must read are no longer in Kafka (retention, truncation)."""


class RewindRefused(PermanentError):
    """A rewind cannot be done as asked (the reason says why and what would work); nothing
    was changed."""


class RewindUnfinished(PermanentError):
    """A rewind was started and not finished: epochs cannot run until it is rerun."""


class ProtocolViolation(PermanentError):
    """The tables contradict the protocol's invariants; never repaired silently."""


# Exit codes of the ``eos`` command and the precommit Spark app, so that a caller that only
# sees a process (SparkSubmitOperator, a shell) can apply the same retry policy.
EXIT_PERMANENT = 2
EXIT_TRANSIENT = 75  # EX_TEMPFAIL in sysexits.h: "try again later"


def is_permanent(error: BaseException) -> bool:
    """Whether a retry must not be attempted (anything not ours is treated as transient)."""
    return isinstance(error, PermanentError)


def exit_code(error: BaseException) -> int:
    return EXIT_PERMANENT if is_permanent(error) else EXIT_TRANSIENT


def describe_failure(error: BaseException) -> str:
    """The operator's message inside a Spark job failure: an EosError raised on an executor
    reaches the driver wrapped in a Java stack trace; pull the original message back out."""
    match = _WRAPPED.search(str(error))
    if match:
        return f"{match.group(1)}: {match.group(2).strip()}"
    lines = [line.strip() for line in str(error).strip().splitlines()]
    # A gRPC failure (Spark Connect) says what happened in its status and details lines.
    grpc = [line for line in lines if line.startswith(("status = ", "details = "))]
    return f"{type(error).__name__}: {' '.join(grpc) if grpc else (lines[0] if lines else '')}"


def wrapped_error_class(error: BaseException) -> type[EosError] | None:
    """The library error class named inside a wrapped Spark failure, if any."""
    match = _WRAPPED.search(str(error))
    found = globals().get(match.group(1)) if match else None
    return found if isinstance(found, type) and issubclass(found, EosError) else None
