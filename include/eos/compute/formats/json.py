"""``event.format: json``: the msgspec parser of ``eos.compute.parse``, unchanged (its speed is
``bench.read_path``'s; its rules and reasons are those every format shares)."""

from __future__ import annotations

from eos.compute.parse import Parser
from eos.core.config import EventConfig


def parser(event: EventConfig) -> Parser:
    return Parser(event)
