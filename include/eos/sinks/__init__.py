"""Sinks: where committed epochs go, one module per sink type, each implementing the
two-phase-commit contract of ``eos.core.sink.Sink`` (and the capabilities it supports). The
parts a sink type is built from sit beside it, named after it (``kafka_markers``,
``kafka_producer``, ...).

Sink types are declared as entry points (``eos.sinks`` in pyproject.toml), so the core finds
them by name without importing this package. Importing a sink module is cheap (the DAG file
parses configs): each imports its client library (deltalake, confluent-kafka) only inside its
methods.
"""
