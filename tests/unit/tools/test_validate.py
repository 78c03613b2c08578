"""``eos validate``, ``eos schema`` and ``eos reference``: a file checked as a DAG run loads it
(every kind of error named with its key and file), the JSON Schema editors check with (the
shipped pipelines pass, a typo fails), and the generated reference pages kept current."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from eos.core import sink as sink_module
from eos.core.sink import Sink
from eos.tools.cli import build_parser, main
from eos.tools.docs_reference import pages

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "include" / "pipelines").glob("*.yaml"))

GOOD = {
    "name": "orders",
    "kafka": {"topic": "orders"},
    "event": {"time": {"field": "ts", "format": "epoch_ms"},
              "fields": {"shop": "string", "amount": "decimal(12,2)"}},
    "group_by": ["shop"],
    "window": {"type": "tumbling", "size": "1m"},
    "aggregations": {"orders": "count(*)", "revenue": "sum(amount)"},
}


def write(directory: Path, name: str, **changes: object) -> Path:
    data = {**GOOD, "name": name, **changes}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def validate(capsys: pytest.CaptureFixture[str], *targets: str) -> tuple[int, list[str]]:
    code = main(["validate", *targets])
    return code, capsys.readouterr().out.splitlines()


def test_a_good_file_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "orders")
    assert validate(capsys, str(path)) == (0, [f"OK    {path} (pipeline orders)"])


@pytest.mark.parametrize(("changes", "named"), [
    ({"windw": {"size": "1m"}}, "field 'windw': Extra inputs are not permitted"),
    ({"window": {"type": "tumbling", "size": "soon"}}, "field 'window.size'"),
    ({"group_by": ["country"]}, "group_by: field 'country' is not declared in event.fields"),
    ({"aggregations": {"n": "median(amount)"}}, "aggregation 'n': unknown function 'median'"),
    ({"event": {**GOOD["event"], "filter": "rand() > 0.5"}}, "field 'event'"),
    ({"sinks": {"windows": [{"delta": "../elsewhere"}]}}, "leaves the pipeline's root"),
    ({"sinks": {"windows": [{"kafka": {"topic": "out", "acks": "all"}}]}}, "kafka sink: acks"),
    ({"sinks": {"windows": [{"parquet": "out"}]}}, "unknown sink type 'parquet'"),
    ({"schedule": {"poll": "1s"}}, "schedule needs cron, lag_records or max_delay"),
], ids=["unknown key", "bad duration", "undeclared field", "unknown function", "impure filter",
        "sink table outside the root", "sink option", "sink type", "schedule"])
def test_each_kind_of_error_names_its_key_and_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object],
        named: str) -> None:
    path = write(tmp_path, "orders", **changes)
    code, lines = validate(capsys, str(path))
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith(f"ERROR invalid pipeline config {path.resolve()}: ")
    assert named in lines[0]


def test_the_impure_filter_names_its_function(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "orders", event={**GOOD["event"], "filter": "rand() > 0.5"})
    assert "rand" in validate(capsys, str(path))[1][0]


def test_broken_yaml_and_a_missing_file_are_errors_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nkafka: {topic: [unclosed\n")
    code, lines = validate(capsys, str(broken), str(tmp_path / "absent.yaml"))
    assert code == 1
    assert lines[0].startswith(f"ERROR pipeline config {broken} is not valid YAML: line ")
    assert lines[1].startswith(f"ERROR cannot read pipeline config {tmp_path / 'absent.yaml'}")


def test_a_directory_is_every_file_in_it_and_one_bad_file_fails_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "a")
    bad = write(tmp_path, "b", group_by=["nope"])
    code, lines = validate(capsys, str(tmp_path))
    assert code == 1
    assert lines[0] == f"OK    {good} (pipeline a)"
    assert lines[1].startswith(f"ERROR invalid pipeline config {bad.resolve()}")


def test_names_and_the_default_read_the_pipelines_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_PIPELINES_DIR", str(tmp_path))
    write(tmp_path, "a")
    write(tmp_path, "b")
    assert validate(capsys, "b") == (0, [f"OK    {tmp_path / 'b.yaml'} (pipeline b)"])
    code, lines = validate(capsys)
    assert code == 0 and [line.split()[-1] for line in lines] == ["a)", "b)"]
    (tmp_path / "a.yaml").unlink()
    (tmp_path / "b.yaml").unlink()
    code, lines = validate(capsys)
    assert code == 1 and lines == [f"ERROR no pipeline files in {tmp_path}"]


def test_a_sink_type_that_crashes_is_one_error_line_and_the_next_file_is_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(Sink):
        kind = "broken"

        @classmethod
        def parse_options(cls, options: object) -> object:
            raise TypeError("this sink type has a bug")

    monkeypatch.setattr(sink_module, "_registered", {"broken": Broken})
    bad = write(tmp_path, "a", sinks={"windows": [{"broken": "x"}]})
    good = write(tmp_path, "b")
    code, lines = validate(capsys, str(bad), str(good))
    assert code == 1
    assert lines == [f"ERROR pipeline config {bad} could not be checked: TypeError: this sink "
                     "type has a bug", f"OK    {good} (pipeline b)"]


def test_every_shipped_pipeline_validates(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = validate(capsys, *map(str, SHIPPED))
    assert code == 0 and len(lines) == len(SHIPPED) >= 4


def schema(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["schema"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_schema_is_a_json_schema_the_shipped_pipelines_meet(
        capsys: pytest.CaptureFixture[str]) -> None:
    printed = schema(capsys)
    jsonschema.Draft202012Validator.check_schema(printed)
    validator = jsonschema.Draft202012Validator(printed)
    for path in SHIPPED:
        data = yaml.safe_load(path.read_text())
        assert [error.message for error in validator.iter_errors(data)] == [], path.name
    assert list(validator.iter_errors(GOOD)) == []


@pytest.mark.parametrize(("changes", "problem"), [
    ({"windw": {}}, "'windw' was unexpected"),
    ({"kafka": {"topic": "t", "strat": "latest"}}, "'strat' was unexpected"),
    ({"window": {"type": "sliding", "size": "1m"}}, "'sliding' is not one of"),
    ({"window": {"size": "five minutes"}}, "is not valid under any of the given schemas"),
    ({"aggregations": {"n": "median(x)"}}, "does not match"),
    ({"event": {"time": {"format": "epoch_ms", "field": "ts"}, "fields": {"x": "int"}}},
     "is not valid under any of the given schemas"),
    ({"sinks": {"windows": [{"delta": "a", "kafka": "b"}]}}, "has too many properties"),
], ids=["top-level typo", "nested typo", "enum", "duration", "function", "type", "sink"])
def test_the_schema_rejects_what_the_loader_rejects(
        capsys: pytest.CaptureFixture[str], changes: dict[str, object], problem: str) -> None:
    validator = jsonschema.Draft202012Validator(schema(capsys))
    messages = [error.message for error in validator.iter_errors({**GOOD, **changes})]
    assert any(problem in message for message in messages), messages


def test_the_committed_reference_and_schema_are_current() -> None:
    """docs/reference/ is generated from the config models, the sink types' options and the
    command parser: when one of them changes, the pages must be generated again."""
    stale = [str(path) for path, text in pages(build_parser()).items()
             if not (ROOT / path).exists() or (ROOT / path).read_text() != text]
    assert stale == [], (f"stale: {stale}; regenerate them with `eos reference` at the "
                         "project's root and commit the result")


def test_reference_writes_the_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reference", "--root", str(tmp_path)]) == 0
    for path, text in pages(build_parser()).items():
        assert (tmp_path / path).read_text() == text
    configuration = (tmp_path / "docs/reference/configuration.md").read_text()
    for key in ("`allowed_lateness`", "`lag_records`", "`stall_after`", "### delta",
                "### kafka", "`log_retention`"):
        assert key in configuration


def guide_pipelines() -> list[tuple[str, str]]:
    """Every whole pipeline the guide and the README show: a YAML block with a top-level name,
    kafka and event, with or without windows (the guide's fragments show one section at a
    time)."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S):
            if all(re.search(rf"^{key}:", block, re.M) for key in ("name", "kafka", "event")):
                found.append((page.name, block))
    return found


@pytest.mark.parametrize(("page", "block"), guide_pipelines(),
                         ids=[page for page, _ in guide_pipelines()])
def test_every_pipeline_the_guide_shows_validates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], page: str, block: str) -> None:
    path = tmp_path / "shown.yaml"
    path.write_text(block)
    code, lines = validate(capsys, str(path))
    assert code == 0, lines


def test_the_guide_shows_whole_pipelines() -> None:
    assert {page for page, _ in guide_pipelines()} >= {"README.md", "quickstart.md",
                                                       "pipelines.md"}
