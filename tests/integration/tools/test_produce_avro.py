"""``eos produce`` on an Avro pipeline: records in the Schema Registry wire format, written by
confluent-kafka's ``AvroSerializer`` through the pipeline's registry, two writer versions (the
change halfway), the bad kinds quarantined by the pipeline's own decoder with their reasons.

Real broker (the embedded one, over TCP) and the Schema-Registry-compatible stand-in
(``eos.tools.servers.schema_registry``, not Confluent's server) on 127.0.0.1 with basic auth; no
Spark."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from eos.compute.formats import Parsed, Rejected, parser_for
from eos.core.config import PIPELINES_DIR_ENV, load_config
from eos.core.kafka import client_settings, read_partition, topic_watermarks
from eos.tools.cli import main
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic
from eos.tools.produce_avro import UNKNOWN_ID, generate_avro
from eos.tools.servers.schema_registry import SchemaRegistryServer

pytestmark = [pytest.mark.integration]

AUTH_ENV = "EOS_TEST_SR_AUTH"
SHIPPED = Path(__file__).resolve().parents[3] / "include" / "pipelines" / "orders_avro.yaml"


def shipped_orders_pipeline(directory: Path, registry: SchemaRegistryServer) -> Any:
    """The shipped orders_avro pipeline on a topic of its own, pointed at the test registry."""
    data = yaml.safe_load(SHIPPED.read_text())
    data["kafka"]["topic"] = unique_topic("orders")
    data["event"]["schema_registry"] = {"url": registry.url, "auth_env": AUTH_ENV}
    data["tables"]["root"] = str(directory / "tables")
    path = directory / "orders_avro.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def test_eos_produce_writes_two_writer_versions_the_pipeline_reads(
        tmp_path: Path, kafka: str, registry: SchemaRegistryServer,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = shipped_orders_pipeline(tmp_path, registry)
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(tmp_path))
    events = 600
    code = main(["produce", "--pipeline", "orders_avro", "--events", str(events),
                 "--keys", "8", "--bad-fraction", "0.08", "--late-fraction", "0.02",
                 "--start-at", "base"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert registry.password not in out.out + out.err
    assert f"produced {events} records" in out.out

    settings = client_settings()
    values = [message.value()
              for partition, (low, high) in topic_watermarks(settings, config.kafka.topic).items()
              for message in read_partition(settings, config.kafka.topic, partition, low, high)]
    assert len(values) == events
    subject = f"{config.kafka.topic}-value"
    assert len(registry.subjects[subject]) == 3  # version 1, version 2, the one missing a path
    shown = {i: json.dumps(registry.schema_by_id(i)) for i in registry.subjects[subject]}
    (v2,) = [i for i, text in shown.items() if "channel" in text]
    (lost,) = [i for i, text in shown.items() if "region" not in text]
    (v1,) = set(shown) - {v2, lost}

    parser = parser_for(config.event)
    ids: Counter[int] = Counter()
    reasons: Counter[str] = Counter()
    for raw in values:
        outcome = parser.parse(raw, None)
        if isinstance(outcome, Parsed):
            ids[int.from_bytes(raw[1:5], "big")] += 1
        else:
            assert isinstance(outcome, Rejected)
            reasons[outcome.reason.split(":")[0]] += 1
    assert set(ids) == {v1, v2} and min(ids.values()) > events // 3  # the change halfway
    assert reasons[f"schema id {UNKNOWN_ID} is not known to the Schema Registry"] > 0
    assert reasons["not in the Schema Registry wire format (magic byte 0, a 4-byte schema id, "
                   "the payload)"] > 0
    assert reasons[f"schema id {v1}"] + reasons[f"schema id {v2}"] > 0  # truncated
    assert reasons[f"schema id {lost}"] > 0  # lost customer.region: "missing field"
    assert sum(reasons.values()) + sum(ids.values()) == events


@pytest.mark.parametrize("time", [{"field": "ts", "format": "epoch_s"},
                                  {"field": "meta.at", "format": "iso8601"},
                                  {"format": "kafka_timestamp"}])
def test_every_time_format_and_type_is_written_so_the_pipeline_reads_it(
        tmp_path: Path, registry: SchemaRegistryServer, time: dict[str, str]) -> None:
    from eos.tools.produce_avro import serializer

    config = shipped_orders_pipeline(tmp_path, registry)
    data = yaml.safe_load(Path(str(config.source_path)).read_text())
    data["event"]["time"] = time
    data["event"]["fields"].update({"flag": "boolean", "ratio": "double",
                                    "big": {"path": "payment.big", "type": "decimal(38,9)"}})
    path = tmp_path / "all_types.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_config(path)
    spec = GeneratorSpec(events=200, keys=4, disorder_ms=900, seed=5)
    wire = serializer(config)
    parser = parser_for(config.event)
    for record in generate_avro(spec, config, evolve_at=100):
        sent = wire(record)
        outcome = parser.parse(sent.value, sent.timestamp_ms)
        assert isinstance(outcome, Parsed), outcome
        # disorder up to 900 ms, and epoch_s cuts to the second
        assert sent.timestamp_ms - 2000 < outcome.event_ms <= sent.timestamp_ms
