"""``eos produce`` continues a stream: a second batch starts after the records already on the
topic (its events are not all behind the watermark the first batch moved), or where
``--start-at`` says. Runs against the embedded broker (or ``KAFKA_BOOTSTRAP_SERVERS``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from eos.core.kafka import client_settings, read_partition, topic_watermarks
from eos.tools.generator import BASE_TIME_MS
from eos.tools.pipelines import write_pipeline


def _batch(config_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "eos.tools.cli", "produce", "--config",
                          str(config_path), "--events", "200", *extra],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    return out


def _records(topic: str) -> list[tuple[int, int]]:
    """(Kafka timestamp, event time) of every record on the topic, by timestamp."""
    settings = client_settings()
    found = []
    for partition, (low, high) in topic_watermarks(settings, topic).items():
        for message in read_partition(settings, topic, partition, low, high):
            found.append((message.timestamp()[1], json.loads(message.value())["ts"]))
    return sorted(found)


def test_a_second_batch_continues_after_the_first_unless_told_where(
        tmp_path: Path, kafka: str) -> None:
    config = write_pipeline(tmp_path)
    topic, path = config.kafka.topic, config.source_path
    assert path is not None
    _batch(path, "--disorder-ms", "50")
    first = _records(topic)
    assert first[0][0] == BASE_TIME_MS  # an empty topic: the fixed start, as generate's
    _batch(path, "--disorder-ms", "50", "--seed", "1")  # the same or another seed: continues
    second = [r for r in _records(topic) if r not in first]
    assert len(second) == 200
    assert min(t for t, _ in second) > max(t for t, _ in first)
    # no event of the second batch is older than the first batch's newest event by more than
    # its own disorder: the watermark the first batch moved does not make it late
    assert min(e for _, e in second) >= max(e for _, e in first) - 50
    # --start-at base replays the fixed start: the same timestamps as the first batch
    _batch(path, "--disorder-ms", "50", "--start-at", "base")
    replayed = [r for r in _records(topic) if r[0] < min(t for t, _ in second)]
    assert sorted({t for t, _ in replayed}) == sorted({t for t, _ in first})
    out = _batch(path, "--start-at", "2030-01-01T00:00:00Z")
    assert "arrival times from 2030-01-01T00:00:00.000+00:00" in out.stdout

