"""The ``arm`` fixture: fault points armed in this process for one test (a pytest plugin,
listed in tests/conftest.py), so every test that injects a fault arms it the same way."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from eos.core import faults


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[Callable[[str], None]]:
    """``arm("commit.between_sinks:fail")``: arm fault points in this process (``fail``: the
    first hit raises ``InjectedFault``, what a crash there leaves behind, without a crash); the
    environment is restored after the test."""
    saved = {k: os.environ.get(k) for k in ("EOS_FAULTS", "EOS_FAULTS_DIR")}
    directory = tmp_path / "faults"

    def arm_(spec: str) -> None:
        os.environ["EOS_FAULTS"] = spec
        os.environ["EOS_FAULTS_DIR"] = str(directory)
        faults._armed.cache_clear()

    yield arm_
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    faults._armed.cache_clear()
