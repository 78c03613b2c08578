"""What a protocol step did: a closed vocabulary, so callers branch on types, not on strings.

``Outcome`` is a ``StrEnum``: it prints as its value in logs and command output, and compares
equal to that string, but code should compare against the members.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    # begin
    PLANNED = "planned"  # a new plan was logged for the next epoch
    REUSED_RUN = "reused (this run's epoch)"  # the run was bound to an epoch already
    REUSED_LOG = "reused (logged plan)"  # the next epoch's plan was already in the log
    REUSED_RACE = "reused (a concurrent plan won)"  # two planners raced; the first logged wins
    # precommit
    STAGED = "staged"  # epoch N's rows were written to staging in one commit
    REUSED_STAGE = "reused"  # staging already held N for this plan hash: nothing written
    DISCARDED = "already committed (late attempt discarded)"  # a zombie stepped aside
    # A rewind began, or N-1's staged state was replaced, after this attempt read its state:
    # what it computed is not staged (the replay computes N again).
    SUPERSEDED = "superseded (its state was rewound while it computed)"
    # N's commit has sealed it (a zombie that computed late): its staged rows are what the
    # commit promotes, so nothing is staged over them.
    SEALED = "being committed: not restaged"
    # commit (whole epoch and per sink)
    COMMITTED = "committed"  # this attempt wrote it
    ALREADY_COMMITTED = "already committed"  # found committed (earlier attempt or lost race)
    # abort
    ABORTED = "aborted"  # staged rows of N dropped
    NOTHING_TO_ABORT = "already committed: nothing to abort"
    IN_COMMIT = "being committed: not aborted"  # its commit sealed it: the commit must finish
    # recover
    NOTHING_PENDING = "nothing pending"  # no planned epoch after the last checkpoint
    NEEDS_PRECOMMIT = "needs precommit"  # the pending epoch is planned but not staged
    # rewind
    REWOUND = "rewound"  # every table is back at epoch N; the next runs replay N + 1..
    NOTHING_TO_REWIND = "nothing to rewind"  # N is the last committed epoch already

    @property
    def wrote(self) -> bool:
        """Whether this attempt changed a table (as opposed to finding the work done)."""
        return self in (Outcome.PLANNED, Outcome.STAGED, Outcome.COMMITTED, Outcome.ABORTED,
                        Outcome.REWOUND)


NO_EPOCH = -1  # the epoch a table or sink holds of a pipeline that never committed there
