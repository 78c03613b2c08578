"""The harness the integration tests share (fixtures live in conftest.py): free ports, table
versions, sinks by name, recovery then audit, and the ``eos`` command in a process. Epochs run
through the library's one loop, ``eos.compute.epochs``; pipelines come from
``support.pipelines``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from eos.compute.epochs import run_until_caught_up
from eos.core.config import PipelineConfig

KILLED = -9  # the return code of a process a fault point SIGKILLed (eos.core.faults)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def finish_and_audit(config: PipelineConfig, spark: Any, tag: str, records: int) -> None:
    """Recovery by rerunning: run the remaining epochs (a commit that fails transiently run
    again), then audit everything from scratch: every sink equals the ground truth of all
    ``records`` produced."""
    from eos.tools.audit.verify import audit

    # Retried commits, as the DAG retries its commit task: the embedded broker now and then
    # drops a transactional producer's id mapping (INVALID_PRODUCER_ID_MAPPING), transiently.
    run_until_caught_up(config, tag, spark=spark, commit_retries=2)
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == records


def sink(config: PipelineConfig, name: str) -> Any:
    """The configured sink named ``name`` (``delta:target``, ``kafka:<topic>``)."""
    from eos.core.sink import sinks_for

    return next(s for s in sinks_for(config) if s.name == name)


def delta_path(config: PipelineConfig, table: str) -> str:
    return sink(config, f"delta:{table}").path


def table_versions(config: PipelineConfig) -> dict[str, int]:
    """The Delta version of the pipeline's own tables and of every Delta sink."""
    from deltalake import DeltaTable

    from eos.core.layout import tables_for
    from eos.core.sink import sinks_for

    t = tables_for(config)
    paths = {"epochs": t.epochs, "staging": t.staging, "checkpoints": t.checkpoints}
    paths.update({s.name: s.path for s in sinks_for(config) if s.kind == "delta"})
    return {name: DeltaTable(path).version() for name, path in paths.items()}


def eos_cli(config: PipelineConfig, *args: str, faults: str | None = None,
            faults_dir: Path | None = None, env: dict[str, str] | None = None,
            wait: bool = True) -> Any:
    """``eos <command> --config <pipeline> ...`` in its own process, optionally with faults.

    ``wait=False`` returns the running ``Popen`` (for races: start several, then wait)."""
    full_env = {**os.environ, **(env or {})}
    if faults:
        full_env["EOS_FAULTS"] = faults
        full_env["EOS_FAULTS_DIR"] = str(faults_dir)
    cmd = [sys.executable, "-m", "eos.tools.cli", args[0], "--config", str(config.source_path),
           *args[1:]]
    if not wait:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, check=False)


def commit_summary(stdout: str) -> dict[str, Any]:
    """What ``eos commit`` printed: the commit's summary as JSON on its last line."""
    return json.loads(stdout.strip().splitlines()[-1])
