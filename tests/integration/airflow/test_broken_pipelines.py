"""A broken pipeline file takes down only itself: parsing the DAG file through Airflow's DagBag
still yields every good pipeline's DAGs, and each broken file (unparsable YAML, an invalid field,
a pipeline name another file declares too) becomes a placeholder DAG that names the file and the
loader's error, is paused and unscheduled, and whose one task fails with that ConfigError."""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home as af  # isort: skip

import logging
from pathlib import Path
from typing import Any

import pytest

from eos.core.errors import ConfigError

from support.pipelines import SHIPPED_PIPELINES

# The session's Airflow metadata DB (support.airflow_home), for the one real run below.
airflow_db = af.airflow_db

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

CLICKS = (SHIPPED_PIPELINES / "clicks.yaml").read_text()
BROKEN_TAGS = {"eos", "eos-broken"}


def named(name: str) -> str:
    """The shipped clicks pipeline, declaring pipeline ``name``."""
    return CLICKS.replace("\nname: clicks\n", f"\nname: {name}\n")


def parse_dag_folder(pipelines: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The DagBag the DAG processor would fill from the DAG file, with ``pipelines`` as the
    deployment's pipelines directory."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("EOS_PIPELINES_DIR", str(pipelines))
    return DagBag(dag_folder=str(af.DAGS_DIR))


class Records(logging.Handler):
    """The records of one logger, whatever handlers Airflow's logging config installs (it
    replaces the root logger's, pytest's caplog among them, when it first loads)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def run_placeholder(dag: Any) -> None:
    """What a person who triggers the placeholder gets: its one task's callable, run."""
    (task,) = dag.tasks
    task.python_callable()


def test_broken_files_become_placeholders_and_good_pipelines_still_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    (tmp_path / "clicks.yaml").write_text(CLICKS)
    (tmp_path / "not_yaml.yaml").write_text("name: [unclosed\nkafka: {topic: x\n")
    (tmp_path / "bad_field.yaml").write_text(
        named("bad_field").replace("max_records: 50000", "max_records: lots"))
    (tmp_path / "twin_a.yaml").write_text(named("twin"))
    (tmp_path / "twin_b.yaml").write_text(named("twin"))

    logged = Records()
    logger = logging.getLogger("eos.airflow.dag_factory")
    logger.addHandler(logged)
    try:
        bag = parse_dag_folder(tmp_path, monkeypatch)
    finally:
        logger.removeHandler(logged)

    assert not bag.import_errors, bag.import_errors
    assert sorted(bag.dag_ids) == ["eos_bad_field", "eos_clicks", "eos_clicks__rewind",
                                   "eos_not_yaml", "eos_twin_a", "eos_twin_b"]
    assert set(bag.dags["eos_clicks"].task_dict) == {"begin", "precommit", "commit", "abort"}
    assert set(bag.dags["eos_clicks__rewind"].task_dict) == {"rewind"}

    expected = {
        "eos_not_yaml": (tmp_path / "not_yaml.yaml", "is not valid YAML"),
        "eos_bad_field": (tmp_path / "bad_field.yaml", "field 'epoch.max_records'"),
        "eos_twin_a": (tmp_path / "twin_a.yaml",
                       "two files declare pipeline 'twin': twin_a.yaml, twin_b.yaml"),
        "eos_twin_b": (tmp_path / "twin_b.yaml",
                       "two files declare pipeline 'twin': twin_a.yaml, twin_b.yaml"),
    }
    warnings = [r.getMessage() for r in logged.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(expected), warnings
    for dag_id, (path, error) in expected.items():
        dag = bag.dags[dag_id]
        assert str(path) in dag.doc_md and error in dag.doc_md, (dag_id, dag.doc_md)
        assert error in dag.description, (dag_id, dag.description)
        assert set(dag.tags) == BROKEN_TAGS, dag_id
        assert dag.is_paused_upon_creation is True
        served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        assert served.timetable.summary == "None", dag_id  # no schedule
        assert [w for w in warnings if str(path) in w and error in w], (dag_id, warnings)
        with pytest.raises(ConfigError) as raised:
            run_placeholder(dag)
        assert error in str(raised.value) and str(raised.value) in dag.doc_md, dag_id
    # Each twin names the other's file.
    assert "twin_b.yaml" in bag.dags["eos_twin_a"].doc_md
    assert "twin_a.yaml" in bag.dags["eos_twin_b"].doc_md


def test_a_placeholder_never_takes_a_good_pipelines_dag_id(tmp_path: Path) -> None:
    """A broken file whose id ``eos_<stem>`` a good pipeline's DAG holds gets a suffixed one:
    the good pipeline keeps its DAG, and the broken file still shows."""
    from eos.airflow import pipeline_dags

    (tmp_path / "clicks.yaml").write_text("name: [unclosed\n")
    (tmp_path / "renamed.yaml").write_text(CLICKS)  # declares pipeline 'clicks'
    (tmp_path / "clicks__rewind.yaml").write_text("- not a mapping\n")
    dags = pipeline_dags(tmp_path)

    assert sorted(dags) == ["eos_clicks", "eos_clicks__broken", "eos_clicks__rewind",
                            "eos_clicks__rewind__broken"]
    assert set(dags["eos_clicks"].task_dict) == {"begin", "precommit", "commit", "abort"}
    assert set(dags["eos_clicks__rewind"].task_dict) == {"rewind"}
    for dag_id, path in (("eos_clicks__broken", "clicks.yaml"),
                         ("eos_clicks__rewind__broken", "clicks__rewind.yaml")):
        assert str(tmp_path / path) in dags[dag_id].doc_md
        assert set(dags[dag_id].tags) == BROKEN_TAGS
        with pytest.raises(ConfigError):
            run_placeholder(dags[dag_id])


def test_a_triggered_placeholder_fails_at_once_with_the_config_error(
        airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture) -> None:
    """A real run of a placeholder (``DAG.test``): its task fails on its first try, and its log
    carries the ConfigError."""
    (tmp_path / "bad_field.yaml").write_text(
        named("bad_field").replace("max_records: 50000", "max_records: lots"))
    bag = parse_dag_folder(tmp_path, monkeypatch)
    assert not bag.import_errors, bag.import_errors

    run = af.run_dag(bag.dags["eos_bad_field"], 0)
    assert run.state == "failed"
    (ti,) = run.get_task_instances()
    assert (ti.state, ti.try_number) == ("failed", 1)
    out = capfd.readouterr().out
    assert "ConfigError" in out and "field 'epoch.max_records'" in out, out[-3000:]
