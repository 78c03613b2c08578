"""Read range and parse: the plan's Kafka records as a DataFrame, parsed by the reader itself
(``eos.compute.reader``) with the pipeline's event format (``eos.compute.formats``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import pyarrow as pa

from eos.core.config import EventConfig, PipelineConfig
from eos.core.config.rows import headers_read, metadata_read
from eos.core.kafka import client_settings, security_keys
from eos.core.metadata import KAFKA_HEADERS, KAFKA_KEY, KAFKA_KEY_BYTES, KAFKA_TIMESTAMP_TYPE
from eos.core.plan import Plan
from eos.core.schema import Carried, read_schema


def parse_records(event: EventConfig) -> Callable[[Iterator[pa.RecordBatch]],
                                                  Iterator[pa.RecordBatch]]:
    """mapInArrow function: raw Kafka records -> parsed events or quarantine reasons. The parser
    is compiled on the worker (from the picklable config), once per task."""

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eos.compute.formats import parser_for

        parser = parser_for(event)
        for batch in batches:
            yield parser.parse_batch(batch)

    return parse


# Who plans a read's splits: this process (``planned_read``), or the ``eos_kafka`` data source.
Planner = Literal["driver", "source"]


def read_ranges(spark: Any, config: PipelineConfig, plan: Plan, parse: bool = False,
                constants: dict[str, int] | None = None,
                planner: Planner = "driver") -> Any:
    """The plan's Kafka records as a DataFrame: raw (topic, partition, offset, key, value...),
    or with ``parse`` parsed by the reader itself (``eos.compute.reader``: one Python stage, not
    two); with ``constants``, a long column each, the same value in every row.

    ``planner="driver"`` plans the splits here (``eos.compute.reader.planned_read``);
    ``"source"`` reads through the ``eos_kafka`` data source, which plans them in Python
    processes of Spark's (the benchmark's comparison, bench.read_path)."""
    from eos.compute.reader import planned_read

    options = range_options(config, plan, parse, constants)
    if planner == "source":
        return spark.read.format("eos_kafka").options(**options).load()
    return planned_read(spark, options)


def range_options(config: PipelineConfig, plan: Plan, parse: bool = False,
                  constants: dict[str, int] | None = None) -> dict[str, str]:
    """``eos_kafka``'s options for the plan's ranges."""
    import json

    from eos.compute.reader import (
        CONSTANTS_OPTION,
        METADATA_OPTION,
        PARSE_OPTION,
        TOPICS_OPTION,
        event_option,
        shareable_client,
    )
    from eos.core import faults

    ranges = [{"partition": r.partition, "start": r.start, "until": r.until, "topic": r.topic}
              for r in plan.ranges]
    # The bootstrap is resolved once, on the driver; secrets are resolved on the executors.
    bootstrap = client_settings(config.kafka.client)["bootstrap.servers"]
    shared = shareable_client(config.kafka.client)
    options = {
        "topic": plan.topic,
        "ranges": json.dumps(ranges),
        "split_records": str(config.kafka.split_records),
        "min_splits": str(config.spark.shuffle_partitions),
        "read_timeout_ms": str(config.kafka.read_timeout),
        "config": config.source_path or "",
        "client": json.dumps(shared),
        "client_in_file": json.dumps(sorted(set(config.kafka.client) - set(shared))),
        "bootstrap": bootstrap,
        # Names only: an executor without the connection's security settings fails naming them.
        "connection_keys": json.dumps(security_keys()),
        "faults": json.dumps(faults.settings()),  # tests only; empty in production
    }
    if parse:
        options[PARSE_OPTION] = event_option(config.event)
        carry = carried(config)
        if carry.any:
            options[METADATA_OPTION] = carry.to_json()
        if not plan.topic:  # several topics: each record says its own
            options[TOPICS_OPTION] = "true"
    if constants:
        options[CONSTANTS_OPTION] = json.dumps(constants)
    return options


def carried(config: PipelineConfig) -> Carried:
    """What the reader carries beside each parsed record for this pipeline: only what its
    filter, select and sinks read (each costs every record's bytes in the parsed input)."""
    read = metadata_read(config)
    return Carried(pair=bool(read & {KAFKA_KEY, KAFKA_TIMESTAMP_TYPE}),
                   key_bytes=KAFKA_KEY_BYTES in read, headers=KAFKA_HEADERS in read,
                   header_names=headers_read(config))


def read_parsed(spark: Any, config: PipelineConfig, plan: Plan, marks: dict[str, int]) -> Any:
    """The plan's records parsed, with ``marks`` as constant columns (wm(N-1)); an empty plan
    gives the same (empty) input without starting Python workers."""
    from eos.compute.precommit.resume import local_frame
    from eos.compute.reader import with_constants

    if plan.records:
        return read_ranges(spark, config, plan, parse=True, constants=marks)
    empty = read_schema(config.event, carried(config), not plan.topic).empty_table()
    return local_frame(spark, with_constants(empty, marks))
