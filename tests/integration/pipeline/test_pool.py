"""A protocol phase gives the Delta handles it borrowed from the process's pool
(``eos.core.pool``) back when it is done, without garbage collection: ``begin`` on a real topic of
the broker."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

import eos.core.pool
from eos.core.kafka import client_settings
from eos.core.pool import checkout
from eos.core.protocol import begin
from eos.core.tables import ensure_tables
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import write_pipeline
from eos.tools.produce import send


def test_a_phase_gives_its_handles_back_when_it_is_done(tmp_path: Path, kafka: str) -> None:
    config = write_pipeline(tmp_path)
    spec = GeneratorSpec(events=20, keys=2)
    send(generate(spec), spec.events, config.kafka.topic, client_settings(), progress=False)
    begin(config, run_id="r0")  # no garbage collection: the phase gives its handles back itself
    tables = ensure_tables(config)
    pooled = [held for held, _ in eos.core.pool._pool.get(tables.epochs, [])]
    assert len(pooled) == 1, "begin did not give its handle of the epoch log back"
    log = tables.handle(tables.epochs)  # the next phase borrows it, brought up to date
    assert log is pooled[0]
    assert log.version() == DeltaTable(tables.epochs).version()
    assert checkout(tables.epochs) is not log, "a handle in use was lent again"

