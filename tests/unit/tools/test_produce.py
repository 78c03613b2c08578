"""A generator spec alone fixes its records (``generate`` starts at ``BASE_TIME_MS`` unless told
otherwise), which the tests' ground truth relies on; ``--start-at`` reads ``continue``, ``base``,
milliseconds and ISO instants. The continuing stream on a real topic is
tests/integration/tools/test_produce.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from eos.tools.generator import BASE_TIME_MS, GeneratorSpec, generate
from eos.tools.produce import parse_start


def test_a_spec_fixes_its_records_and_start_ms_only_shifts_them() -> None:
    spec = GeneratorSpec(events=50, disorder_ms=30, late_fraction=0.1, seed=4)
    fixed = list(generate(spec))
    assert fixed[0].timestamp_ms == BASE_TIME_MS and fixed == list(generate(spec))
    shifted = list(generate(replace(spec, start_ms=BASE_TIME_MS + 60_000)))
    assert [r.timestamp_ms - 60_000 for r in shifted] == [r.timestamp_ms for r in fixed]
    times = [json.loads(r.value or b"{}")["ts"] for r in (*fixed, *shifted)]
    assert times[50:] == [t + 60_000 for t in times[:50]]


def test_start_at_reads_continue_base_milliseconds_and_iso_instants() -> None:
    assert parse_start("continue") is None
    assert parse_start("base") == BASE_TIME_MS
    assert parse_start("1767225600123") == 1_767_225_600_123
    assert parse_start("2026-01-01T01:00:00Z") == BASE_TIME_MS + 3_600_000
    assert parse_start("2026-01-01T02:00:00+01:00") == BASE_TIME_MS + 3_600_000
    for bad in ("yesterday", "2026-01-01T00:00:00"):  # no offset: not an instant
        with pytest.raises(ValueError, match="--start-at"):
            parse_start(bad)




def test_generated_clicks_fill_fields_by_name_and_type_never_the_time_with_a_value() -> None:
    """``ts: long`` declared before ``value``: the value goes to ``value`` (and a ``long``
    value is a whole number), the time to ``ts``; every generated record parses."""
    from eos.compute.formats import Parsed
    from eos.compute.formats.json import Parser
    from eos.core.config import parse_config
    from eos.tools.generator import generate, generator_options

    config = parse_config({"name": "p", "kafka": {"topic": "t"}, "event": {
        "time": {"field": "ts", "format": "epoch_ms"},
        "fields": {"key": "string", "ts": "long", "value": "long"}}})
    options = generator_options(config)
    assert (options["key_field"], options["time_field"], options["value_field"]) == (
        "key", "ts", "value") and options["value_whole"]
    records = list(generate(GeneratorSpec(events=50, seed=3, **options)))
    parser = Parser(config.event)
    assert all(isinstance(parser.parse(r.value, r.timestamp_ms), Parsed) for r in records)
    assert all(isinstance(json.loads(r.value)["value"], int) for r in records)


def test_a_json_event_the_generator_cannot_fill_is_refused_naming_the_fields() -> None:
    from eos.core.config import parse_config
    from eos.core.errors import ConfigError
    from eos.tools.generator import generator_options

    config = parse_config({"name": "p", "kafka": {"topic": "t"}, "event": {
        "fields": {"key": "string", "value": "double", "country": "string",
                   "note": {"path": "note", "type": "string", "optional": True}}}})
    with pytest.raises(ConfigError, match=r"also requires \['country'\]"):
        generator_options(config)
