"""The fast tier stays fast: no Spark, no broker, every test marked ``fast``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest

HERE = Path(__file__).resolve().parent


def test_the_fast_tier_imports_no_spark_and_no_airflow() -> None:
    """Every module of the tier, imported in a fresh interpreter (the tier's own imports: the
    suite's root conftest is not part of it)."""
    package = f"{HERE.parent.name}.{HERE.name}"
    modules = sorted(f"{package}.{p.stem}" for p in HERE.glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(HERE.parents[1])!r})\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "import eos.core.kafka as k\n"
        "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "                  ('pyspark', 'airflow', 'py4j')),\n"
        "                  'compute': sorted(m for m in sys.modules\n"
        "                                    if m.startswith('eos.compute.')),\n"
        "                  'kafka_clients': len(k._metadata_clients)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"loaded": [], "compute": ["eos.compute.writers"], "kafka_clients": 0}


def test_a_kafka_client_fails_the_test_that_creates_it() -> None:
    with pytest.raises(AssertionError, match="must not reach a broker"):
        confluent_kafka.Consumer({"group.id": "g"})


def test_every_test_of_the_tier_is_marked_fast(request: pytest.FixtureRequest) -> None:
    mine = [item for item in request.session.items
            if Path(str(item.fspath)).resolve().parent == HERE]
    assert mine and all(item.get_closest_marker("fast") for item in mine)
