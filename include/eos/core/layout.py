"""Where a pipeline's own tables live (epoch log, staging, checkpoints). Pure path logic with no
heavy imports, so that parsing a DAG file does not load deltalake or pyarrow. Sinks place their
own tables (``eos.sinks.delta``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eos.core.config import PipelineConfig


@dataclass(frozen=True)
class Tables:
    root: Path

    @property
    def epochs(self) -> str:
        return str(self.root / "epochs")

    @property
    def staging(self) -> str:
        return str(self.root / "staging")

    @property
    def checkpoints(self) -> str:
        return str(self.root / "checkpoints")

    @property
    def audits(self) -> str:
        """The verdicts of ``eos verify`` (``eos.core.verdicts``): written by the audit, never read
        by
        the protocol."""
        return str(self.root / "audits")


def tables_for(config: PipelineConfig) -> Tables:
    return Tables(config.root)
