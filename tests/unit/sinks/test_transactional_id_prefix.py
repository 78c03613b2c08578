"""A Kafka sink's ``transactional_id_prefix`` as the config gives it: today's ids by default,
``${VAR}`` read from the environment (one YAML for staging and production), and a bad value
refused when the config loads, naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from eos.core.config import parse_config
from eos.core.errors import ConfigError
from eos.core.sink import sinks_for
from unit.core.test_config import GOOD


def kafka_sink(**options: Any) -> Any:
    config = parse_config({**GOOD, "name": "orders", "sinks": {"windows": [
        {"kafka": {"topic": "totals", **options}}]}})
    return sinks_for(config)[0]


def test_the_default_prefix_gives_todays_ids() -> None:
    assert kafka_sink().transactional_id == "eos:orders:kafka:totals"


def test_the_prefix_is_read_from_the_environment_when_the_config_loads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_DEPLOYMENT", "staging")
    sink = kafka_sink(transactional_id_prefix="eos-${EOS_DEPLOYMENT}")
    assert sink.transactional_id == "eos-staging:orders:kafka:totals"


@pytest.mark.parametrize(("options", "named"), [
    ({"transactional_id_prefix": "eos:prod"}, "transactional_id_prefix 'eos:prod' must be"),
    ({"transactional_id_prefix": ""}, "transactional_id_prefix '' must be"),
    ({"transactional_id_prefix": "x" * 65}, "1 to 64 letters"),
    ({"transactional_id_prefix": "a b"}, "transactional_id_prefix 'a b' must be"),
    ({"transactional_id_prefix": "${EOS_UNSET_PREFIX}"},
     "transactional_id_prefix refers to ${EOS_UNSET_PREFIX}, which is not set"),
    ({"previous_transactional_id_prefix": "old/prefix"}, "previous_transactional_id_prefix"),
    ({"previous_transactional_id_prefix": "eos"}, "previous_transactional_id_prefix is the"),
])
def test_a_bad_prefix_is_refused_at_load_naming_the_key(
        monkeypatch: pytest.MonkeyPatch, options: dict[str, str], named: str) -> None:
    monkeypatch.delenv("EOS_UNSET_PREFIX", raising=False)
    with pytest.raises(ConfigError) as refused:
        kafka_sink(**options)
    assert named in str(refused.value)
