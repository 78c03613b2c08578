"""The ``files`` sink's options and the load-time checks of its path (``eos.sinks.files.sink``):
apart from the sink so that its module keeps to the commit, the rewind and the fill."""

from __future__ import annotations

import posixpath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eos.core.layout import PROTOCOL_TABLES

__all__ = ["FilesOptions", "column_types", "misplaced", "relative"]


class FilesOptions(BaseModel):
    """``{files: {path: DIR_OR_URI, format: parquet|jsonl, partition_by: [cols]}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(min_length=1, description="A directory under the pipeline's tables root, "
                                                "an absolute directory or an s3:// prefix, "
                                                "this sink's alone.")
    format: Literal["parquet", "jsonl"] = Field(default="parquet",
                                                description="The files' format.")
    partition_by: tuple[str, ...] = Field(default=(), description="Hive-style partition "
                                                                  "columns, outermost first.")

    @field_validator("partition_by")
    @classmethod
    def _names(cls, columns: tuple[str, ...]) -> tuple[str, ...]:
        for column in columns:
            if not column or any(c in column for c in "/\\=\x00") or column.startswith(("_",
                                                                                       ".")):
                raise ValueError(f"{column!r} cannot name a partition directory")
        if len(set(columns)) != len(columns):
            raise ValueError("a column is named twice")
        return columns


def column_types(config: Any, output: str) -> dict[str, str]:
    """The types (the config's names) of the output's columns the config tells, for the
    load-time check of ``partition_by``: a rows output's selected columns and coordinates, a
    windows output's group fields and bounds, a quarantine row's raw bytes."""
    from eos.sinks.delta.sink import partition_types

    if output == "quarantine":
        return {"raw_key": "binary", "raw_value": "binary"}
    types = partition_types(config, output)
    if output == "rows":
        from eos.core.config.rows import carries_headers
        from eos.core.metadata import KAFKA_HEADERS

        if carries_headers(config):
            types[KAFKA_HEADERS] = "headers"
    return types


def relative(path: str) -> bool:
    return "://" not in path and not path.startswith("/")


def misplaced(path: str) -> str | None:
    """Why a relative path cannot hold the sink (None: it can): it stays under the pipeline's
    root, never the root itself nor one of its protocol tables."""
    name = posixpath.normpath(path)
    if name == ".":
        return "is the pipeline's tables root itself, which holds its protocol tables"
    if name == ".." or name.startswith("../"):
        return "leaves the pipeline's tables root; give an absolute directory or a URI"
    if name.split("/", 1)[0].lower() in PROTOCOL_TABLES:
        return f"is inside a protocol table of the pipeline ({', '.join(PROTOCOL_TABLES)})"
    return None
