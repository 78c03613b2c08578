"""Where epoch N resumes from: epoch N-1's committed watermark and the chain of files holding
its open windows (``eos.core.window_state``), read only as far as epoch N needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from eos.compute import writers as staging_files
from eos.compute.precommit.watermark import NEG_INF
from eos.compute.windows import END, START
from eos.core.aggregations import aggregations_for
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.delta import scan
from eos.core.errors import ProtocolViolation
from eos.core.layout import Tables
from eos.core.staging import WATERMARK, base_of, rows_staged
from eos.core.tables import group_column, handle, staging_schema
from eos.core.window_state import EMPTY, Chain, WindowRead, chain_of, read_state_file, snapshot_due


@dataclass(frozen=True)
class ResumePoint:
    """What epoch N resumes from: where epoch N-1's open windows are (its chain: a snapshot
    and the changes since, ``eos.core.window_state``), its watermark, and whether N stages a
    snapshot or changes.

    The windows themselves are not read here: ``state_frame`` reads only the files the epoch
    needs (this process when they are few rows, else Spark's executors)."""

    chain: Chain  # EMPTY before epoch 0
    watermark_ms: int
    max_event_ms: int | None
    # Rows N-1 staged, every kind (add actions; a snapshot's open windows left out when N
    # stages changes): what predicts N's size. None: unknown.
    staged_rows: int | None = 0
    snapshot: bool = True  # N stages every open window (kind state), else its changes


def state_columns(config: PipelineConfig) -> list[str]:
    """The columns of an open window in staging: group, bounds, every aggregation's state."""
    states = [name for a in aggregations_for(config) for name, _ in a.state()]
    return [*(group_column(g) for g in config.group_by), START, END, *states]


def resume_state(config: PipelineConfig, tables: Tables,
                 previous: Checkpoint | None) -> ResumePoint:
    """Where epoch N-1's open windows are, and its watermark: the committed state N starts from.

    ``previous`` is N-1's checkpoint (None for epoch 0): its plan hash names N-1's staged rows,
    so no other table is asked which attempt of N-1 was committed. Only N-1's watermark row is
    read here (it names the chain's base); the open windows stay in their files for Spark."""
    if previous is None:
        return ResumePoint(EMPTY, NEG_INF, None)
    staging = handle(tables, tables.staging)
    assert staging is not None  # a committed epoch N-1 staged its rows there
    mark = scan(staging, filters=[("epoch", "=", previous.epoch), ("kind", "=", WATERMARK),
                                  ("plan_hash", "=", previous.plan_hash)]).to_pylist()
    if not mark:
        raise ProtocolViolation(
            f"the state of committed epoch {previous.epoch} is missing from staging; epoch "
            f"{previous.epoch + 1} cannot resume without it"
        )
    chain = chain_of(tables, previous, base_of(mark[0]))
    snapshot = snapshot_due(previous.epoch + 1, chain, config.epoch.state_snapshot_every)
    staged = rows_staged(staging, previous.epoch)
    if staged is not None and not snapshot and chain.base == previous.epoch:
        # N-1 staged a snapshot; N stages changes: the snapshot's rows predict nothing of N's.
        staged = max(0, staged - chain.snapshot_rows)
    return ResumePoint(chain, mark[0]["watermark_ms"], mark[0]["max_event_ms"], staged, snapshot)


def state_frame(spark: Any, config: PipelineConfig, state: ResumePoint,
                read: WindowRead) -> tuple[Any, int | None]:
    """The open-window rows of N-1's chain that ``read`` selects (alive ones only), and how many
    rows the files read hold (an upper bound; None: unknown).

    Files holding at most ``spark.collect_rows`` rows (what this process would collect anyway)
    are read here with pyarrow and handed to Spark as a local relation: cheaper than a
    ``mapInArrow`` job reading them (its Python workers and a task per file). Larger ones are
    read by the executors (``staging_files.read_state``), one task per file up to the
    session's parallelism. Both read with pyarrow, never Spark's Hadoop connector, so staging
    may be on an object store."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = staging_schema(config)
    columns = state_columns(config)
    arrow = pa.schema([schema.field(c) for c in columns])
    files = state.chain.select(read)
    counts = [f.rows for f in files]
    rows = None if None in counts else sum(c or 0 for c in counts)
    filters = read.row_filters(state.watermark_ms)
    if rows is not None and rows <= config.spark.collect_rows:
        local = [read_state_file(f.uri, f.plan_hash, columns, filters).cast(arrow) for f in files]
        return local_frame(spark, pa.concat_tables([arrow.empty_table(), *local])), rows
    tasks = max(1, min(len(files), config.spark.shuffle_partitions))
    frame = (spark.range(0, len(files), 1, numPartitions=tasks)
             .mapInArrow(staging_files.read_state([(f.uri, f.plan_hash) for f in files], columns,
                                                  filters, arrow),
                         from_arrow_schema(arrow)))
    return frame, rows


def local_frame(spark: Any, table: pa.Table) -> Any:
    """``table`` as a DataFrame of ``spark`` (a local relation), every row of it.

    The chunks are combined first: classic PySpark 4.0.1's ``createDataFrame`` of an Arrow table
    whose chunks include an empty one *between* others silently drops every row after it (5 of
    12 rows from chunks of 5, 0 and 7; Spark Connect keeps all 12). A chain file that holds no
    row the epoch reads is such a chunk, and its loss would drop a closing window's rows. The
    schema is given: Spark Connect cannot infer one from an empty table."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table.combine_chunks(), schema=from_arrow_schema(table.schema))
