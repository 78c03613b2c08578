"""The unit tier: tests that need no broker, no Spark, no Airflow and no object store. Every
test under tests/unit is marked ``fast``; run the tier alone with ``pytest -m fast``
(``./dev fast``)."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected from this directory ``fast`` (the hook sees the whole run's
    items, wherever they come from)."""
    for item in items:
        if item.path.is_relative_to(UNIT):
            item.add_marker(pytest.mark.fast)
