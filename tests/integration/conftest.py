"""The integration tier: tests that talk to a real Kafka-protocol broker, run Spark, run
Airflow or use the embedded object store. Every test under tests/integration is marked
``integration`` (``slow`` and ``airflow`` stay per module)."""

from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected from this directory ``integration`` (the hook sees the whole
    run's items, wherever they come from)."""
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
