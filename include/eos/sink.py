"""What a sink author implements, in one import: ``from eos.sink import Sink, SinkCommit, ...``.

eos commits each micro-batch (an *epoch*, numbered 0, 1, 2, ...) to every sink of a pipeline
with a two-phase commit, after Flink's Sink V2: the pre-commit half (computing and staging the
epoch's rows durably) is eos's; a sink implements the commit half, a small ``Committer``, and
says what more it can do by also implementing capabilities, each a separate class.

The contract, method by method (``eos.core.sink`` has every detail; docs/sinks.md a worked
example). The protocol calls them in this order for each epoch N:

1. ``prepare(schema)`` - once before any epoch (``eos begin``): create what the sink needs (a
   table, a topic) from the output's schema; idempotent; fail early when it cannot be made.
2. ``check(N, rows)`` - before the commit *seals* N, while N can still be aborted: find every
   *deterministic* failure here (a value the sink cannot encode, a table whose schema
   conflicts, a record over a size limit) and raise ``SinkCannotTake`` naming it. After the
   seal the commit must eventually succeed: a failure that no retry can pass must never reach
   ``commit``. Reads only; writes nothing a reader of the sink can see.
3. ``commit(N, rows, plan_hash)`` - write N's rows **and N's marker in one atomic step**
   (one transaction, one table version, one manifest created only if absent): a reader sees
   both or neither. Idempotent: when the sink already holds N (``committed_epoch() >= N``),
   write nothing and return ``SinkCommit(..., Outcome.ALREADY_COMMITTED, ...)``; of two
   attempts racing, exactly one writes and the other answers ``ALREADY_COMMITTED``
   (``raced=True``). Epochs arrive in order: a sink holding N - 2 is given N only if the
   tables are broken, so refuse it with ``ProtocolViolation`` (``Sink.follows`` says which
   epoch is next). A failure leaves nothing of N visible and raises a ``TransientError``
   (``SinkUnavailable``, ``CommitConflict``: the same call is retried) or a
   ``PermanentError`` (``SinkRejected``: the task fails with the message).
4. ``committed_epoch(fence=True)`` - the last epoch the sink holds for this pipeline, -1
   (``NO_EPOCH``) for none, read from the sink itself (its marker), never from a cache: a
   new instance in another process must answer the same. With ``fence`` it first fences an
   earlier writer where the sink can (a Kafka transactional id), so a zombie cannot change
   the answer afterwards.
5. ``abort(N)`` - discard whatever an attempt at N left that was not committed; never touch
   a committed epoch; safe to call any number of times (a one-step commit leaves nothing:
   ``abort`` may do nothing).

The marker (which pipeline, which sink, which epoch, which plan hash) lives in the sink and is
written in the same atomic step as the rows: it is how ``committed_epoch`` answers after a
crash, and how a retry finds its epoch already written. A sink writes only what it owns
(``Sink.resources``): two sinks, or two pipelines, writing one table would read each other's
markers and answer "already committed" for epochs they never wrote; refuse another pipeline's
table (``TableOwned``) in ``prepare`` and ``check``.

Capabilities, each tested only when the sink declares it:

- ``SupportsRewind``: ``rewind_target(K)`` then ``rewind(K, target, rewind_id, schema)`` make
  the sink hold epochs ``..K`` only, atomically, idempotently per ``rewind_id``
  (``withdraws = False`` for a sink whose published rows stay published).
- ``SupportsReadBack``: ``read_back(since)`` returns every committed row of epochs
  ``>= since``, ``commits()`` the epochs of its commits on its current line (the audit).
- ``SupportsFill``: an added sink can take the epochs committed before it joined.
- ``SupportsPathRules``: records whose values name no path are quarantined before the seal.
- ``SupportsAssets``: Airflow publishes an asset when an epoch commits.

A sink type is found by name through the ``eos.sinks`` entry points of its package, or by
``register(kind, cls)`` in-process. Test one with ``eos.testing.SinkContract``.
"""

from __future__ import annotations

from eos.core.errors import (
    CommitConflict,
    ConfigError,
    PermanentError,
    ProtocolViolation,
    RewindRefused,
    SinkCannotTake,
    SinkRejected,
    SinkUnavailable,
    TableOwned,
    TableUnwritable,
    TransactionAborted,
    TransientError,
)
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import (
    PIPELINE_ROOT,
    Sink,
    SinkCommit,
    SupportsAssets,
    SupportsFill,
    SupportsPathRules,
    SupportsReadBack,
    SupportsRewind,
    register,
    sink_class,
    validated_options,
)

__all__ = [
    "NO_EPOCH",
    "PIPELINE_ROOT",
    "CommitConflict",
    "ConfigError",
    "Outcome",
    "PermanentError",
    "ProtocolViolation",
    "RewindRefused",
    "Sink",
    "SinkCannotTake",
    "SinkCommit",
    "SinkRejected",
    "SinkUnavailable",
    "SupportsAssets",
    "SupportsFill",
    "SupportsPathRules",
    "SupportsReadBack",
    "SupportsRewind",
    "TableOwned",
    "TableUnwritable",
    "TransactionAborted",
    "TransientError",
    "register",
    "sink_class",
    "validated_options",
]
