"""Sinks: where committed epochs go, each behind the two-phase-commit contract of ``base.Sink``.

This package is the one place that lists sink types. Adding one is a module implementing
:class:`eos.sinks.base.Sink` plus its entry in ``SINK_TYPES``; pipelines then name it in their
``sinks:`` section. Importing this package is cheap (the DAG file parses configs): each sink
module imports its client library (deltalake, confluent-kafka) only inside its methods.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eos.config import PipelineConfig
    from eos.sinks.base import Sink

SINK_TYPES: dict[str, str] = {
    "delta": "eos.sinks.delta:DeltaSink",
    "kafka": "eos.sinks.kafka:KafkaSink",
}


def sink_class(kind: str) -> type[Sink]:
    """The class implementing sink type ``kind``; a clear error naming the known types."""
    if kind not in SINK_TYPES:
        raise ValueError(f"unknown sink type '{kind}'; known: {', '.join(SINK_TYPES)}")
    module, _, name = SINK_TYPES[kind].partition(":")
    return getattr(import_module(module), name)


def sink_name(spec: dict[str, Any]) -> str:
    """The stable name of a configured sink (``delta:target``, ``kafka:clicks-stats``)."""
    ((kind, options),) = spec.items()
    return f"{kind}:{sink_class(kind).describe(options)}"


def sinks_for(config: PipelineConfig) -> list[Sink]:
    """Every sink of a pipeline, in commit order (``SinksConfig.by_output``)."""
    sinks = []
    for output, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        sinks.append(sink_class(kind)(config, output, options))
    return sinks
