"""The protocol core: the epoch state machine (begin, precommit, commit, abort, recover).

Every decision about an epoch is taken here, against one authority: the checkpoint table
(``eos.core.checkpoints``). Epoch N is committed iff its checkpoint row is there; the epoch log is
for people and for reusing plans; sinks are asked only what *they* hold. DAG tasks, the Spark
app, the ``eos`` command, the audit and the chaos run call these functions and decide nothing.

The states of epoch N after the last checkpoint ``c`` (N = c + 1)::

    (none) --begin--> planned --precommit--> staged --commit--> committed (checkpoint row)
                         ^                      |
                         +------abort-----------+   (staging rows of N dropped)

Each transition is idempotent, safe to rerun after a crash at any point, and safe when two
attempts of the same task run at once (a zombie and its retry): planners agree on the first
plan logged, stagers write identical rows, and every sink write and the checkpoint append are
fenced, so exactly one attempt writes each of them.

Steps of different kinds are fenced against each other on the staging table
(``eos.core.staging_fence.Fence``), not by the scheduler: a commit *seals* N before its first sink
write, after which an abort of N is refused (``IN_COMMIT``) and a rewind waits for N's
checkpoint (``EpochCommitting``); a rewind fences staging before it restores anything, after
which a precommit that read its state earlier stages nothing (``SUPERSEDED``) and a commit
that has not sealed yet is refused (``RewindUnfinished``).

One module per step: ``beginning``, ``precommitting``, ``sealing`` and ``committing``,
``aborting``, ``recovering``; ``authority`` holds what every step asks first (the checkpoint's
committed epoch, the sinks', an unfinished rewind) and ``results`` what the steps report.
"""

from eos.core.protocol.aborting import abort
from eos.core.protocol.authority import check_sinks, checkpointed_epoch, join_sinks
from eos.core.protocol.beginning import Began, begin, begin_epoch
from eos.core.protocol.committing import commit
from eos.core.protocol.precommitting import precommit
from eos.core.protocol.recovering import recover
from eos.core.protocol.results import CommitResult, StageResult

__all__ = [
    "Began",
    "CommitResult",
    "StageResult",
    "abort",
    "begin",
    "begin_epoch",
    "check_sinks",
    "checkpointed_epoch",
    "commit",
    "join_sinks",
    "precommit",
    "recover",
]
