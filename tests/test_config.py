"""Pipeline configs: the demo loads; a bad file fails with one message naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eos.config import list_pipelines, load_config, load_pipeline, parse_duration_ms
from eos.errors import ConfigError

GOOD = {
    "name": "x",
    "kafka": {"topic": "t"},
    "window": {"size": "60s", "allowed_lateness": "10s"},
}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_shipped_pipeline_loads() -> None:
    assert list_pipelines(), "the demo pipeline must ship"
    for path in list_pipelines():
        config = load_config(path)
        assert config.name == path.stem
    demo = load_pipeline("clicks")
    assert demo.window.size == 60_000
    assert demo.window.allowed_lateness == 10_000
    assert demo.app_id == "eos:clicks"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"window": {"size": "sixty"}}, "window.size"),
        ({"window": {"size": "60s", "allowed_lateness": [1]}}, "window.allowed_lateness"),
        ({"kafka": {"topic": "t", "start": "middle"}}, "kafka.start"),
        ({"epoch": {"max_records": "many"}}, "epoch.max_records"),
        ({"epoch": {"max_records": 0}}, "epoch.max_records"),
        ({"aggregations": ["count", "median"]}, "aggregations.1"),
        ({"kafka": {"topic": "t", "colour": "red"}}, "kafka.colour"),
    ],
)
def test_bad_field_is_named(tmp_path: Path, patch: dict, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, {**GOOD, **patch}))
    message = str(error.value)
    assert f"field '{field}'" in message
    assert message.count("\n") == 0


@pytest.mark.parametrize("missing", ["kafka", "window", "name"])
def test_missing_field_is_named(tmp_path: Path, missing: str) -> None:
    data = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ConfigError, match=f"field '{missing}': Field required"):
        load_config(_write(tmp_path, data))


def test_unreadable_and_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read pipeline config"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="no pipeline named 'nope'"):
        load_pipeline("nope")
    (tmp_path / "bad.yaml").write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_durations() -> None:
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("2m") == 120_000
    assert parse_duration_ms("1d") == 86_400_000
    assert parse_duration_ms(250) == 250
    for bad in ("1 fortnight", -1, True, "s"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)
