"""The pipeline YAML's JSON Schema, from the config models (``eos schema``), and each installed
sink type's options model: what an editor checks while a file is written and what the
configuration reference lists. The models stay the one rule: a file that loads is the test
(``eos validate``); the schema says the same in a form editors read, except the checks across
sections and each sink's options, which only loading runs."""

from __future__ import annotations

import typing
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from eos.core.config.pipeline import PipelineConfig
from eos.core.sink import ENTRY_POINTS, Sink

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Constraint names pydantic writes where it cannot turn a bound into JSON Schema (a bound on a
# value that is also written as text, a duration): not keywords, so they are left out. The
# descriptions say the bound.
_NOT_KEYWORDS = ("ge", "gt", "le", "lt")

DESCRIPTION = (
    "An eos pipeline: one YAML file per pipeline. The keys are checked here; the checks across "
    "sections (a field used but not declared, two sinks on one table, a filter's functions) "
    "and each sink's options, which are free-form here and validated by the sink type's "
    "parse_options, run when the file loads: `eos validate FILE`.")


# Each section's description for a person writing a file (the models' docstrings say why the
# code is as it is, for whoever changes it).
SECTIONS = {
    "KafkaConfig": "The source: one Kafka topic, a list or a pattern, read by offset ranges an "
                   "epoch plans.",
    "EventConfig": "How a record's value becomes an event: its format, its declared fields, "
                   "its event time, and which records an epoch keeps.",
    "SchemaRegistryConfig": "Where a Schema Registry format (avro, protobuf, json_schema) "
                            "fetches writer schemas by id. Credentials never go in the file: "
                            "auth_env names an environment variable holding user:password, "
                            "connection an Airflow connection; the URL may not carry them.",
    "TimeConfig": "Where the event time is: a field in one of the formats, or the record's "
                  "Kafka timestamp.",
    "WindowConfig": "The event-time windows, half-open [start, end) in UTC: tumbling (size), "
                    "hopping (size, slide) or session (gap).",
    "EpochConfig": "How big an epoch may be and how long the pipeline's own tables keep their "
                   "history.",
    "TablesConfig": "Where the pipeline's own tables (epoch log, staging, checkpoints, audits) "
                    "and its relative Delta sink tables live.",
    "SinksConfig": "Where each output of an epoch goes: a list of sinks per output, each "
                   "receiving every epoch exactly once, in the order listed.",
    "ScheduleConfig": "When epochs start: on a cron, when the data asks for one (lag_records, "
                      "max_delay, watched by a trigger in Airflow's triggerer), or both, "
                      "whichever comes first. At least one of cron, lag_records and max_delay.",
    "SparkConfig": "Spark settings. compute.mode submit: the per-epoch application's. connect: "
                   "the server owns master and memory; the epoch's session gets "
                   "shuffle_partitions and the runtime SQL settings in conf.",
    "ComputeConfig": "Where precommit's Spark work runs: a long-lived Spark Connect server "
                     "(connect, the default) or one spark-submit application per epoch "
                     "(submit). Both run the same precommit.",
    "AlertsConfig": "When a stalled pipeline raises an alert: the checkpoint has not advanced "
                    "for stall_after while records wait. Logged in Airflow's triggerer, and "
                    "told to the notifier if one is set.",
}


def _clean(node: Any) -> Any:
    """``node`` without pydantic's non-keywords (``_NOT_KEYWORDS``), recursively."""
    if isinstance(node, dict):
        return {k: _clean(v) for k, v in node.items() if k not in _NOT_KEYWORDS}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def pipeline_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a pipeline YAML."""
    schema = _clean(PipelineConfig.model_json_schema())
    for name, definition in schema["$defs"].items():
        definition["description"] = SECTIONS.get(name, definition.get("description", ""))
    schema["title"] = "eos pipeline"
    schema["description"] = DESCRIPTION
    return {"$schema": DIALECT, **schema}


def installed_sink_types() -> dict[str, type[Sink]]:
    """Every sink type installed through the ``eos.sinks`` entry points, by name: the ones a
    deployment's pipelines may use (types registered in-process are left out)."""
    found: dict[str, type[Sink]] = {}
    for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda p: p.name):
        cls = point.load()
        if isinstance(cls, type) and issubclass(cls, Sink):
            found[point.name] = cls
    return found


def sink_options_model(cls: type[Sink]) -> type[BaseModel] | None:
    """The pydantic model a sink type keeps as ``options`` (its ``options`` annotation, else
    what ``parse_options`` returns), or None for a sink whose options are not one."""
    for hints in (lambda: typing.get_type_hints(cls).get("options"),
                  lambda: typing.get_type_hints(cls.parse_options).get("return")):
        try:
            model = hints()
        except (NameError, TypeError):  # an annotation only a type checker resolves
            continue
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model
    return None
