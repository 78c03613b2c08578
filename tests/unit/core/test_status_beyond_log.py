"""``eos status`` says in words when committed offsets are past the log's end (a recreated or
truncated topic, an embedded broker restarted empty) instead of printing a negative lag, and
names the two commands that go on."""

from __future__ import annotations

from eos.core.pipeline_status import PartitionLag, PipelineStatus
from eos.core.pipeline_status.rendering import render


def _status(partitions: list[PartitionLag]) -> PipelineStatus:
    return PipelineStatus(name="clicks", topic="clicks", dag_id="eos_clicks", tables_root="/t",
                          committed_epoch=3, epochs=[], epochs_logged=4,
                          partitions=partitions)


def test_committed_offsets_past_the_log_are_said_in_words_not_a_negative_lag() -> None:
    past = PartitionLag(0, committed=10_136, high=0, lag=None, low=0, topic="clicks")
    fine = PartitionLag(1, committed=40, high=50, lag=10, low=0, topic="clicks")
    assert past.beyond_log and not fine.beyond_log
    text = render(_status([past, fine]))
    assert "-10136" not in text and "-10,136" not in text
    row = next(line for line in text.splitlines() if line.strip().startswith("0 "))
    assert row.endswith("beyond the log's end"), row
    assert "committed offsets of clicks[0] are beyond the log's end" in text
    assert "eos acknowledge-loss --pipeline clicks" in text
    assert "eos move-source --pipeline clicks --from earliest" in text
    assert render(_status([fine])).count("beyond") == 0
