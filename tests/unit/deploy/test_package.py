"""The package finds nothing through a checkout: the pipelines and data directories come from
settings, the local Airflow's home gets the documented DAG file and local settings (never
over a file of someone else's), and the version is the distribution's."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import eos
from eos.airflow.environment import DAG_FILE, DAG_FILE_NAME, LOCAL_SETTINGS, prepare_home
from eos.core.config import data_dir, pipeline_path, pipelines_dir

REPO = Path(__file__).resolve().parents[3]
LIBRARY = REPO / "include" / "eos"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("EOS_PIPELINES_DIR", "EOS_DATA_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_pipelines_dir_is_explicit_else_the_environment_else_dot_pipelines(
        clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pipelines_dir() == clean_env / "pipelines"
    assert pipeline_path("clicks") == clean_env / "pipelines" / "clicks.yaml"
    monkeypatch.setenv("EOS_PIPELINES_DIR", "/srv/eos/pipelines")
    assert pipelines_dir() == Path("/srv/eos/pipelines")
    assert pipelines_dir(clean_env / "mine") == clean_env / "mine"


def test_the_data_dir_is_the_environment_else_the_xdg_data_home(
        clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert data_dir() == clean_env / "user" / ".local" / "share" / "eos"
    monkeypatch.setenv("XDG_DATA_HOME", str(clean_env / "xdg"))
    assert data_dir() == clean_env / "xdg" / "eos"
    monkeypatch.setenv("EOS_DATA_DIR", str(clean_env / "data"))
    assert data_dir() == clean_env / "data"


def test_the_airflow_home_gets_the_documented_files_once(tmp_path: Path) -> None:
    prepare_home(tmp_path)
    dag_file = tmp_path / "dags" / DAG_FILE_NAME
    settings = tmp_path / "config" / "airflow_local_settings.py"
    assert dag_file.read_text() == DAG_FILE
    assert settings.read_text() == LOCAL_SETTINGS
    # Airflow parses only files that mention both words (DAG discovery safe mode).
    assert "airflow" in DAG_FILE.lower() and "dag" in DAG_FILE.lower()
    ast.parse(DAG_FILE)
    ast.parse(LOCAL_SETTINGS)
    settings.write_text("# the deployment's own\n")
    prepare_home(tmp_path)
    assert settings.read_text() == "# the deployment's own\n"


def test_no_module_looks_for_files_in_the_checkout() -> None:
    offenders = [str(path.relative_to(REPO)) for path in LIBRARY.rglob("*.py")
                 if "PROJECT_ROOT" in path.read_text() or "parents[4]" in path.read_text()]
    assert offenders == []


def test_the_project_has_the_airflow_layout_around_the_package() -> None:
    """dags/, plugins/, spark_apps/, include/ (the package and the shipped pipelines), tests/,
    docker-compose.yaml and requirements.txt, as an Airflow project has them; the DAG file is
    the one the docs show and ``eos ui`` writes, and the Spark app only calls the package."""
    for name in ("dags", "plugins", "spark_apps", "include", "tests"):
        assert (REPO / name).is_dir(), name
    for name in ("docker-compose.yaml", "requirements.txt"):
        assert (REPO / name).is_file(), name
    assert (REPO / "dags" / DAG_FILE_NAME).read_text() == DAG_FILE
    deploying = (REPO / "docs" / "deploying.md").read_text()
    assert DAG_FILE.split('"""\n\n', 1)[1] in deploying  # the lines the guide shows
    app = (REPO / "spark_apps" / "eos_precommit.py").read_text()
    assert "from eos.compute.app import main" in app and len(app.splitlines()) < 25
    assert (REPO / "plugins" / "README.md").exists()


def test_the_command_reports_the_version_and_takes_a_pipelines_dir(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "eos.tools.cli", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"eos {eos.__version__}"
    (tmp_path / "elsewhere").mkdir()
    proc = subprocess.run([sys.executable, "-m", "eos.tools.cli", "--pipelines-dir",
                           str(tmp_path / "elsewhere"), "status", "--pipeline", "nope"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert f"no pipeline named 'nope' in {tmp_path / 'elsewhere'}" in proc.stderr


def test_the_distribution_declares_its_dependencies_extras_and_entry_points() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and (REPO / "LICENSE").exists()
    names = {req.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
             for req in project["dependencies"]}
    assert {"pyspark", "deltalake", "pyarrow", "confluent-kafka", "pydantic",
            "pyyaml", "msgspec", "sqlglot"} <= names
    # The audit's engine and readers are an extra: Airflow's components need not carry them.
    assert not {"duckdb", "aiokafka"} & names
    extras = project["optional-dependencies"]
    assert {"airflow", "audit", "avro", "protobuf", "json-schema", "s3", "celery", "postgres",
            "docs", "iceberg", "dev"} <= set(extras)
    # Into an existing Airflow 3 environment: a range, never a pin that would replace it.
    airflow = next(req for req in extras["airflow"] if req.startswith("apache-airflow>"))
    assert airflow == "apache-airflow>=3.3,<4"
    plugins = project["entry-points"]["airflow.plugins"]
    assert plugins == {"eos_epochs": "eos.airflow.plugin:EpochsViewPlugin"}
    assert (LIBRARY / "compute" / "app.py").exists()


def test_a_missing_extra_is_one_error_that_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.core import extras
    from eos.core.errors import MissingExtra

    extras.require_format("json")  # the base install reads JSON
    for extra in extras.EXTRAS:
        extras.require(extra, "this environment")  # the repository's has every extra
    monkeypatch.setitem(extras.EXTRAS, "avro", ("fastavro", "no_such_module_here"))
    with pytest.raises(MissingExtra) as raised:
        extras.require_format("avro")
    assert str(raised.value) == ("event.format avro needs the 'avro' extra (missing: "
                                 "no_such_module_here): pip install 'eos-pipeline[avro]'")
    assert not raised.value.retryable
