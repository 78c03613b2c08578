"""The checks across a config's sections: each needs the whole pipeline (its sinks, its tables'
root, its declared fields) and the module that owns the rule (``eos.core.sink``,
``eos.core.layout``, ``eos.core.storage``, ``eos.core.aggregations``), so no section can make
it alone. Each raises ``ValueError``: pydantic reports it with the field's path."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eos.core.aggregations import FUNCTIONS
from eos.core.config.kafka_source import topic_pattern
from eos.core.errors import ConfigError
from eos.core.layout import Tables, resources_collide, table_resource
from eos.core.sink import PIPELINE_ROOT, sink_class, sink_name
from eos.core.storage import refuse_unsafe_settings

if TYPE_CHECKING:  # annotations only: the pipeline module runs these checks, so imports this one
    from eos.core.config.pipeline import PipelineConfig
    from eos.core.config.sinks import SinksConfig


def check_unique_sinks(sinks: SinksConfig) -> None:
    """Each sink appears once: two entries of one sink would receive each epoch twice."""
    names = [sink_name(spec) for _, spec in sinks.by_output()]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"each sink may appear once per pipeline; repeated: {doubled}")


def check_root_keeps_the_fence(config: PipelineConfig) -> None:
    """The tables' root, wherever it resolves (``EOS_TABLES_BASE`` included), is refused
    under a storage setting that breaks the commit fence (``eos.core.storage``)."""
    try:
        refuse_unsafe_settings(config.root)
    except ConfigError as error:
        raise ValueError(str(error)) from None


def check_sinks_apart(config: PipelineConfig) -> None:
    """No two sinks claim one resource (``Sink.resources``: a table, a marker partition),
    and no sink claims one of the pipeline's protocol tables: each would make a sink read
    another writer's data as its own. The message names both claimants and the place."""
    claimed = [(f"the pipeline's {name} table (a protocol table)", table_resource(path))
               for name, path in Tables(config.root).protocol_tables().items()]
    for output, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        who = f"sink {sink_name(spec)} ({output})"
        for resource in sorted(sink_class(kind).resources(options, config.name)):
            resource = resource.replace(PIPELINE_ROOT, str(config.root))
            for other, theirs in claimed:
                if resources_collide(resource, theirs):
                    raise ValueError(_collision(who, resource, other, theirs))
            claimed.append((who, resource))


def _collision(who: str, resource: str, other: str, theirs: str) -> str:
    """The message for two claims of one place (``check_sinks_apart``)."""
    place = resource if resource == theirs else f"{resource}, which overlaps {theirs}"
    if "protocol table" in other:
        return (f"sinks: {who} writes {place}, {other}: a sink may never write the pipeline's "
                "own tables; name another table")
    return (f"sinks: {who} and {other} both claim {place}: two sinks of one pipeline may not "
            "write one place; give each its own")


def check_shape(config: PipelineConfig) -> None:
    """An aggregating pipeline has ``window`` and ``aggregations`` (and may have ``group_by``);
    a stateless one has none of them, ``select`` at most, and its sinks say ``rows``. A mix
    is refused naming the keys: half a window spec is a mistake, not a pipeline."""
    given = {key for key in ("group_by", "window", "aggregations")
             if getattr(config, key)}
    if config.window is not None and config.aggregations:
        shadowed = sorted(set(config.select) & set(config.event.fields))
        if shadowed:
            raise ValueError(f"select: {shadowed} are declared fields; a derived field takes a "
                             "name of its own")
        if config.sinks.rows is not None:
            raise ValueError("sinks: rows is the output of a pipeline without windows; an "
                             "aggregating pipeline's outputs are windows, late and quarantine")
        if config.event.time.format == "none":
            raise ValueError("event.time: windows need an event time (a field, or "
                             "format: kafka_timestamp)")
        return
    if given:
        missing = sorted({"window", "aggregations"} - given)
        raise ValueError(f"{sorted(given)} given without {missing}: an aggregating pipeline "
                         "has window and aggregations (group_by optional); a pipeline "
                         "without windows has none of them")
    extra = sorted({"windows", "late"} & config.sinks.model_fields_set)
    if extra:
        raise ValueError(f"sinks: {extra} are outputs of an aggregating pipeline; a pipeline "
                         "without windows has rows and quarantine")
    if not config.sinks.rows:
        raise ValueError("sinks: rows needs at least one sink")


def check_fields_declared(config: PipelineConfig) -> None:
    """Every field used is declared and fits its use: one message naming it."""
    declared = config.field_types
    for name in config.group_by:
        if name not in declared:
            raise ValueError(f"group_by: field '{name}' is not declared in event.fields "
                             f"or select (declared: {sorted(declared)})")
    if len(set(config.group_by)) != len(config.group_by):
        raise ValueError(f"group_by lists a field twice: {config.group_by}")
    for output, spec in config.aggregations.items():
        if output in config.group_by:
            raise ValueError(f"aggregation '{output}' has the name of a group_by field")
        if spec.field is None:
            continue
        if spec.field not in declared:
            raise ValueError(f"aggregation '{output}': field '{spec.field}' is not declared "
                             f"in event.fields or select (declared: {sorted(declared)})")
        problem = FUNCTIONS[spec.function].refuses(declared[spec.field])
        if problem:
            raise ValueError(f"aggregation '{output}': {spec}: {problem}")


def check_sinks_can_serve(config: PipelineConfig) -> None:
    """Each sink accepts this pipeline's outputs (``Sink.check_pipeline``: e.g. a Kafka
    sink's record limit against the largest record an output can make). After the
    field checks: it builds the outputs' schemas from the declared fields."""
    for output, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        sink_class(kind).check_pipeline(options, config, output)


def check_source_not_written(config: PipelineConfig) -> None:
    """The source names or matches no topic a sink of the pipeline writes (its output or
    marker topics): each epoch would read the last one's output as new input."""
    source = config.kafka
    pattern = topic_pattern(source.pattern) if source.pattern is not None else None
    for output, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        for topic in sorted(sink_class(kind).topics_written(options, config.name)):
            named = topic in (source.named_topics or [])
            if named or (pattern is not None and pattern.match(topic)):
                how = "names" if named else f"pattern '{source.pattern}' matches"
                raise ValueError(
                    f"kafka: the source {how} topic '{topic}', which sink {sink_name(spec)} "
                    f"({output}) writes: the pipeline would read its own output as input. "
                    "Name the source topics, or narrow the pattern (e.g. a negative lookahead "
                    f"^(?!{topic}$)...)")
