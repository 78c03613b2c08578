"""What needs no broker running: with none configured, the error says how to start one; a topic
spec of ``eos broker start`` is a name and a positive partition count."""

from __future__ import annotations

from pathlib import Path

import pytest

from eos.core.errors import ConfigError, KafkaUnavailable
from eos.core.kafka import client_settings
from eos.tools.servers import broker as embedded


def test_no_broker_configured_says_how_to_start_one(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path))
    with pytest.raises(KafkaUnavailable, match="eos broker start"):
        client_settings()


@pytest.mark.parametrize("text", ["", ":3", "t:", "t:0", "t:x", "t:-1"])
def test_a_topic_spec_is_a_name_and_a_positive_count(text: str) -> None:
    with pytest.raises(ConfigError, match="NAME or NAME:PARTITIONS"):
        embedded.TopicSpec.parse(text)
    assert embedded.TopicSpec.parse("t:3") == embedded.TopicSpec("t", 3)
    assert str(embedded.TopicSpec.parse("t")) == "t"

