"""Fixtures of the test Spark cluster (a standalone master, two workers, a Connect server on it)."""

from __future__ import annotations

__all__: list[str] = []
