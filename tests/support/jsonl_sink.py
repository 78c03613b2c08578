"""A JSON-lines file sink, written against eos's sink contract alone (docs/sinks.md shows this
file whole; tests/unit/protocol/test_jsonl_sink.py runs it through the protocol).

Each epoch is one file, ``<directory>/epoch-<N>.jsonl``, one JSON object per row. The file's
name is the sink's marker: the rows and the marker appear in one atomic step, when the file is
linked into place. Readers take only files named ``epoch-*.jsonl``.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from eos.core.errors import ProtocolViolation, SinkCannotTake, SinkUnavailable
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import Sink, SinkCommit, validated_options

EPOCH_FILE = re.compile(r"^epoch-(\d{12})\.jsonl$")


class JsonLinesOptions(BaseModel):
    """``{jsonl: DIRECTORY}`` or ``{jsonl: {directory: DIRECTORY}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    directory: str = Field(min_length=1, description="An absolute directory, this sink's alone.")


class JsonLinesSink(Sink):
    """One output of a pipeline as JSON-lines files, one per epoch."""

    kind = "jsonl"
    options: JsonLinesOptions

    # -- what runs when the pipeline loads: no I/O, no client library --------------------------

    @classmethod
    def parse_options(cls, options: Any) -> JsonLinesOptions:
        data = {"directory": options} if isinstance(options, str) else options
        parsed = validated_options(JsonLinesOptions, data, "a jsonl sink names a directory")
        if not Path(parsed.directory).is_absolute():
            raise ValueError(f"a jsonl sink's directory is an absolute path, got "
                             f"{parsed.directory!r}")
        return parsed

    @classmethod
    def describe(cls, options: JsonLinesOptions) -> str:
        return options.directory

    @classmethod
    def resources(cls, options: JsonLinesOptions, pipeline_name: str) -> frozenset[str]:
        return frozenset({f"jsonl-directory:{os.path.normpath(options.directory)}"})

    # -- the two-phase commit -------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return Path(self.options.directory)

    def prepare(self, schema: pa.Schema) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def committed_epoch(self, fence: bool = True) -> int:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return NO_EPOCH
        except OSError as error:
            raise SinkUnavailable(f"sink {self.name}: cannot list the directory: "
                                  f"{error.strerror}") from None
        epochs = [int(match.group(1)) for match in map(EPOCH_FILE.match, names) if match]
        return max(epochs, default=NO_EPOCH)

    def check(self, epoch: int, rows: pa.Table) -> None:
        encode(rows)  # a value JSON cannot hold fails here, before the epoch is sealed

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        held = self.committed_epoch()
        if held >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
        if held != epoch - 1:
            raise ProtocolViolation(f"sink {self.name} holds epoch {held}; it cannot receive "
                                    f"epoch {epoch}")
        try:
            return self._publish(epoch, rows)
        except OSError as error:  # a full disk, a lost mount: nothing published, retry
            raise SinkUnavailable(f"sink {self.name}: {error.strerror}") from None

    def _publish(self, epoch: int, rows: pa.Table) -> SinkCommit:
        """Write a temporary file, make it durable, then link it into place: a link, unlike a
        rename, refuses to replace a file, so of two racing attempts exactly one publishes."""
        final = self.directory / f"epoch-{epoch:012d}.jsonl"
        handle, temp = tempfile.mkstemp(dir=self.directory, prefix=f".epoch-{epoch:012d}.",
                                        suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(encode(rows))
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temp, final)
            except FileExistsError:
                return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows,
                                  raced=True)
        finally:
            os.unlink(temp)
        _sync(self.directory)
        return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)

    def abort(self, epoch: int) -> None:
        """Remove what a crashed attempt left: its temporary files, never a published one."""
        for temp in self.directory.glob(f".epoch-{epoch:012d}.*.tmp"):
            temp.unlink(missing_ok=True)


def encode(rows: pa.Table) -> bytes:
    """The rows as JSON lines; ``SinkCannotTake`` for a value JSON cannot hold."""
    lines = []
    for row in rows.to_pylist():
        try:
            lines.append(json.dumps({k: _json(v) for k, v in row.items()}, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise SinkCannotTake(f"a row JSON cannot hold: {error}") from None
    return "".join(line + "\n" for line in lines).encode()


def _json(value: Any) -> Any:
    """Timestamps as ISO 8601, decimals as exact strings, bytes as base64, non-finite doubles
    by name."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _sync(directory: Path) -> None:
    """Make the new name durable: a crash after the commit returned must not lose the file."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
