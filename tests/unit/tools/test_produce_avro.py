"""``eos produce``'s Avro writer schemas are derived from the declared event (two versions of
the shipped orders pipeline's), and its generated records carry them."""

from __future__ import annotations

from pathlib import Path

from eos.core.config import load_config
from eos.tools.generator import GeneratorSpec
from eos.tools.produce_avro import generate_avro, writer_schema

SHIPPED = Path(__file__).resolve().parents[3] / "include" / "pipelines" / "orders_avro.yaml"


def test_the_writer_schema_is_derived_from_the_declared_event() -> None:
    event = load_config(SHIPPED).event
    v1, v2 = writer_schema(event, 1), writer_schema(event, 2)
    fields = {f["name"]: f["type"] for f in v1["fields"]}
    assert fields["ts"] == {"type": "long", "logicalType": "timestamp-millis"}
    payment = {f["name"]: f["type"] for f in fields["payment"]["fields"]}
    assert payment["amount"] == {"type": "bytes", "logicalType": "decimal", "precision": 12,
                                 "scale": 2}
    assert payment["shipping"][0] == "null"  # optional: a union with null
    assert fields["coupon"] == ["null", "string"]
    payment2 = {f["name"]: f["type"] for f in v2["fields"][2]["type"]["fields"]}
    assert payment2["amount"]["scale"] == 4 and payment2["amount"]["precision"] == 14
    assert v2["fields"][-1] == {"name": "channel", "type": ["null", "string"], "default": None}
    spec = GeneratorSpec(events=50, keys=8, bad_fraction=0.2, late_fraction=0.1, seed=3)
    config = load_config(SHIPPED)
    assert list(generate_avro(spec, config, 25)) == list(generate_avro(spec, config, 25))

