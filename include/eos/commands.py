"""Protocol commands of the ``eos`` CLI (run, status); filled in by the core."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def register(sub: argparse._SubParsersAction, pipeline_args: Callable) -> None:
    return None
