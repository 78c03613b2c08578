"""Shared fixtures: a real Kafka-protocol broker over TCP, a real Spark session, temp tables.

The broker is the embedded one (``eos.broker``, the same code as ``eos broker start``) unless
``KAFKA_BOOTSTRAP_SERVERS`` names another broker, in which case every test runs against that.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eos import broker as embedded

from support import write_pipeline

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after
# pytest has closed the captured streams: keep it quiet instead of printing a logging error.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("eos-data")
    previous = os.environ.get("EOS_DATA_DIR")
    os.environ["EOS_DATA_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("EOS_DATA_DIR", None)
    else:
        os.environ["EOS_DATA_DIR"] = previous


@pytest.fixture(scope="session")
def kafka(data_dir: Path) -> Iterator[str]:
    """Bootstrap address of the broker under test."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    state = embedded.start()
    try:
        yield state["bootstrap"]
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def spark(data_dir: Path, kafka: str):
    """One local[2] Spark session for the whole run: Spark start-up is the slow part."""
    from eos.stage import spark_session

    config = write_pipeline(data_dir)
    session = spark_session(config)
    yield session
    session.stop()
