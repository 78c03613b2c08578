"""Where a pipeline's tables live. Pure path logic with no heavy imports, so that parsing a DAG
file (which needs the target's path for its Asset) does not load deltalake or pyarrow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eos.config import PipelineConfig


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
    def target(self) -> str:
        return str(self.root / "target")

    @property
    def late(self) -> str:
        return str(self.root / "late")

    @property
    def quarantine(self) -> str:
        return str(self.root / "quarantine")

    def sinks(self) -> list[tuple[str, str]]:
        """(name, path) in commit order: side sinks first, the target last."""
        return [("late", self.late), ("quarantine", self.quarantine), ("target", self.target)]


def tables_for(config: PipelineConfig) -> Tables:
    return Tables(config.root)
