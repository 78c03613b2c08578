"""``eos chaos --changes`` edits a copy of the pipeline's file between epochs: each change
loads as the next DAG run would, the original file is never touched, and only the sinks a
change added are ever removed."""

from __future__ import annotations

import random
from pathlib import Path

from eos.core.config import load_config
from eos.core.sink import sink_name

from support.memory import IN_MEMORY
from support.pipelines import make_pipeline


def test_changes_are_made_on_a_copy_and_each_loads(tmp_path: Path) -> None:
    from eos.tools.chaos_changes import ConfigChanges

    config = make_pipeline(tmp_path, base={**IN_MEMORY, "event": {
        **IN_MEMORY["event"], "filter": "key <> 'x'"}})
    original = Path(str(config.source_path)).read_text()
    changes = ConfigChanges.copy_of(config)
    rng = random.Random(3)
    declared = {"memory:a", "memory:b", "memory:c"}
    filters = set()
    source = config.kafka.topic
    for epoch in range(1, 30):
        changed = changes.change(rng, epoch)
        # Topics only join, the original first, at most three in all.
        topics = changed.kafka.topics or [changed.kafka.topic]
        assert topics == [source, *(f"{source}-chaos-{n}" for n in range(1, len(topics)))]
        names = {sink_name(spec) for _, spec in changed.sinks.by_output()}
        assert declared <= names  # the declared sinks stay
        assert names - declared == {f"delta:{n}" for n in changes.added}
        assert changed.name == config.name and changed.root == config.root
        filters.add(changed.event.filter)
    assert filters == {"key <> 'x'", "(key <> 'x') AND kafka_offset % 7 <> 3"}
    assert {m.split(": ")[1] for m in changes.made} == {"add sink", "remove sink",
                                                         "edit filter", "add topic"}
    assert changed.kafka.topics is not None and len(changed.kafka.topics) == 3
    assert Path(str(config.source_path)).read_text() == original
    assert load_config(changes.path).name == config.name
    changes.cleanup()
    assert not changes.path.exists()
