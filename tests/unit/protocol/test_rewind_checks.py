"""``eos.core.rewind``: what a rewind checks before it writes anything, how it resumes, and the
replay after it, on in-process sinks that implement ``SupportsRewind`` (and ones that do not)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, InjectedFault, RewindRefused, RewindUnfinished
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.plan import Plan
from eos.core.protocol import begin, checkpointed_epoch
from eos.core.rewind import RewindResult, rewind
from eos.core.sink import SupportsRewind, sinks_for

from support.memory import MemorySource, RewindableMemorySink, at_once, log_rows, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline, same_pipeline

SINKS = ["memory_rewind:a", "memory_rewind:b", "memory_rewind:c"]


def three_epochs(config: PipelineConfig, source: MemorySource) -> list[Plan]:
    plans = []
    for i in range(3):
        plans.append(run_epoch(config, source, run_id=f"run-{i}"))
        source.produce(0, 6)
    return plans


def nothing_written(config: PipelineConfig, sinks: list[str]) -> bool:
    return (log_rows(config, phase=epochlog.REWINDING) == []
            and all(store(config, n).rewinds == [] for n in sinks))


def held(config: PipelineConfig) -> dict[str, tuple[int, list[int]]]:
    """Each sink's marker and the epochs it holds rows of."""
    return {n: (store(config, n).marker, sorted(store(config, n).rows)) for n in SINKS}


# -- what a rewind refuses ----------------------------------------------------------------------

@pytest.mark.parametrize("to_epoch", [3, -2])
def test_an_epoch_that_is_not_committed_is_refused(rewindable: PipelineConfig,
                                                   source: MemorySource, to_epoch: int) -> None:
    three_epochs(rewindable, source)
    with pytest.raises(RewindRefused, match=f"to epoch {to_epoch}: the committed epochs are 0..2"):
        rewind(rewindable, to_epoch)
    assert nothing_written(rewindable, SINKS) and checkpointed_epoch(rewindable) == 2


def test_the_last_committed_epoch_is_nothing_to_rewind(rewindable: PipelineConfig,
                                                       source: MemorySource) -> None:
    three_epochs(rewindable, source)
    assert rewind(rewindable, 2).outcome is Outcome.NOTHING_TO_REWIND
    assert nothing_written(rewindable, SINKS)


def test_a_sink_without_the_rewind_capability_is_refused(tmp_path: Path,
                                                         source: MemorySource) -> None:
    sinks = {"windows": [{"memory_rewind": "a"}], "late": [{"memory": "b"}],
             "quarantine": [{"memory": "c"}]}
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    assert [isinstance(s, SupportsRewind) for s in sinks_for(config)] == [True, False, False]
    three_epochs(config, source)
    with pytest.raises(RewindRefused, match=r"sink\(s\) memory:b, memory:c cannot be rewound") \
            as refused:
        rewind(config, 0)
    assert "memory_rewind:a" not in str(refused.value)
    assert nothing_written(config, ["memory_rewind:a"]) and checkpointed_epoch(config) == 2


def test_a_sink_that_cannot_withdraw_needs_consent_to_republish(tmp_path: Path,
                                                                source: MemorySource) -> None:
    sinks = {"windows": [{"memory_keep": "a"}], "late": [{"memory_rewind": "b"}],
             "quarantine": [{"memory_rewind": "c"}]}
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    three_epochs(config, source)
    with pytest.raises(RewindRefused, match=r"sink\(s\) memory_keep:a cannot withdraw the "
                                            r"records of epochs 1\.\.2"):
        rewind(config, 0)
    assert nothing_written(config, ["memory_keep:a", "memory_rewind:b"])
    done = rewind(config, 0, republish=True)
    assert done.outcome is Outcome.REWOUND and done.plan is not None
    assert done.plan.republish == ["memory_keep:a"]
    kept = store(config, "memory_keep:a")
    assert kept.marker == 0 and sorted(kept.rows) == [0, 1, 2]  # published stays published
    assert store(config, "memory_rewind:b").marker == 0
    assert sorted(store(config, "memory_rewind:b").rows) == [0]


def test_a_changed_config_is_refused_for_a_partial_rewind(rewindable: PipelineConfig,
                                                          source: MemorySource) -> None:
    """Epochs 0..N stay committed as computed: they must mean what the current config means.
    A full replay (-1) recomputes everything, so it may change the config."""
    three_epochs(rewindable, source)
    changed = same_pipeline(rewindable, window={"type": "tumbling", "size": "20s"})
    with pytest.raises(RewindRefused, match=r"changed since: window\.size: 10000 -> 20000.*"
                                            "Rewind to -1"):
        rewind(changed, 0)
    assert nothing_written(rewindable, SINKS)
    assert rewind(changed, -1).outcome is Outcome.REWOUND
    assert checkpointed_epoch(changed) == -1


def test_a_sink_that_cannot_go_back_refuses_before_anything_is_written(
        rewindable: PipelineConfig, source: MemorySource) -> None:
    three_epochs(rewindable, source)
    forgetful = store(rewindable, "memory_rewind:b")
    forgetful.versions = forgetful.versions[-1:]  # its history no longer reaches epoch 0
    with pytest.raises(RewindRefused, match="sink memory_rewind:b never held epoch 0"):
        rewind(rewindable, 0)
    assert nothing_written(rewindable, SINKS)


# -- what a rewind does, and the replay after it ------------------------------------------------

def test_a_rewind_takes_every_table_back_and_the_replay_reads_the_logged_plans(
        rewindable: PipelineConfig, source: MemorySource) -> None:
    plans = three_epochs(rewindable, source)
    first = {n: [store(rewindable, n).rows[e].to_pylist() for e in range(3)] for n in SINKS}
    done = rewind(rewindable, 0)
    assert done.outcome is Outcome.REWOUND and checkpointed_epoch(rewindable) == 0
    assert held(rewindable) == dict.fromkeys(SINKS, (0, [0]))
    assert [c.epoch for c in checkpoints.read_all(tables_for(rewindable))] == [0]
    # The replay: epoch 1's logged plan (not what the source holds now), resumed from epoch 0's
    # staged state: the same rows as the first time.
    for i in (1, 2):
        assert run_epoch(rewindable, source, run_id=f"replay-{i}") == plans[i]
    assert {n: [store(rewindable, n).rows[e].to_pylist() for e in range(3)]
            for n in SINKS} == first
    assert [store(rewindable, n).written for n in SINKS] == [[0, 1, 2, 1, 2]] * 3


def test_a_full_rewind_replays_from_the_first_epoch(rewindable: PipelineConfig,
                                                    source: MemorySource) -> None:
    plans = three_epochs(rewindable, source)
    assert rewind(rewindable, -1).outcome is Outcome.REWOUND
    assert checkpointed_epoch(rewindable) == -1
    assert held(rewindable) == dict.fromkeys(SINKS, (-1, []))
    assert begin(rewindable, "replay-0", source=source) == plans[0]


def test_an_unfinished_rewind_blocks_begin_until_it_is_run_again(
        rewindable: PipelineConfig, source: MemorySource, arm) -> None:
    three_epochs(rewindable, source)
    arm("rewind.before_checkpoints:fail")  # sinks and staging restored, the checkpoint not
    with pytest.raises(InjectedFault):
        rewind(rewindable, 0)
    assert checkpointed_epoch(rewindable) == 2
    assert held(rewindable) == dict.fromkeys(SINKS, (0, [0]))
    with pytest.raises(RewindUnfinished, match=r"a rewind to epoch 0 .* finish it"):
        begin(rewindable, source=source)
    with pytest.raises(RewindUnfinished, match=r"a rewind to epoch 0 .* run it again"):
        rewind(rewindable, 1)
    (started,) = log_rows(rewindable, phase=epochlog.REWINDING)
    resumed = rewind(rewindable, 0)
    assert resumed.outcome is Outcome.REWOUND and resumed.plan is not None
    assert resumed.plan.rewind_id in started["details"]  # the logged rewind, finished
    assert [store(rewindable, n).rewinds for n in SINKS] == [[resumed.plan.rewind_id]] * 3
    assert checkpointed_epoch(rewindable) == 0
    assert begin(rewindable, source=source).epoch == 1


def test_a_rewind_resumes_only_under_the_sinks_it_was_planned_for(
        rewindable: PipelineConfig, source: MemorySource, arm) -> None:
    three_epochs(rewindable, source)
    arm("rewind.after_log:fail")
    with pytest.raises(InjectedFault):
        rewind(rewindable, 0)
    more = {"windows": [{"memory_rewind": "a"}, {"memory_rewind": "d"}],
            "late": [{"memory_rewind": "b"}], "quarantine": [{"memory_rewind": "c"}]}
    changed = same_pipeline(rewindable, sinks=more)
    with pytest.raises(ConfigError, match="was planned for the sinks memory_rewind:a, "
                                          "memory_rewind:b, memory_rewind:c"):
        rewind(changed, 0)
    assert [store(rewindable, n).rewinds for n in SINKS] == [[], [], []]
    assert rewind(rewindable, 0).outcome is Outcome.REWOUND


def test_racing_rewinds_log_one_rewind_and_restore_once(
        rewindable: PipelineConfig, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attempts plan the same rewind at once: exactly one logs it, the other finishes that
    one (or finds it finished); every table is restored once."""
    three_epochs(rewindable, source)
    barrier = threading.Barrier(2, timeout=30)
    target = RewindableMemorySink.rewind_target

    def planned_together(self: RewindableMemorySink, epoch: int) -> int | None:
        if self.name == "memory_rewind:a":
            barrier.wait()
        return target(self, epoch)

    monkeypatch.setattr(RewindableMemorySink, "rewind_target", planned_together)
    results: list[RewindResult] = at_once(lambda: rewind(rewindable, 0),
                                          lambda: rewind(rewindable, 0))
    assert Outcome.REWOUND in {r.outcome for r in results}
    assert {r.outcome for r in results} <= {Outcome.REWOUND, Outcome.NOTHING_TO_REWIND}
    (started,) = log_rows(rewindable, phase=epochlog.REWINDING)
    ids = {r.plan.rewind_id for r in results if r.plan is not None}
    assert len(ids) == 1 and ids.pop() in started["details"]
    assert all(len(store(rewindable, n).rewinds) == 1 for n in SINKS)
    assert checkpointed_epoch(rewindable) == 0
    assert held(rewindable) == dict.fromkeys(SINKS, (0, [0]))
