"""``SinkContract``: the sink contract (``eos.sink``) as pytest tests a sink author runs against
their real sink, after Flink's connector test suites (a base class the connector subclasses).

Subclass it in a test module (a class whose name starts with ``Test``), say which sink to build
for a pipeline, and pytest runs every check below against it::

    from eos.testing import SinkContract

    class TestMySink(SinkContract):
        sink_type = MySink  # registered for the tests (an installed sink is found by kind)

        def sink_spec(self, directory):
            return {"mysink": {"path": str(directory / "out")}}

Each test gets a pipeline of its own (``contract_pipeline``: the sink on the ``windows``
output, tables under pytest's ``tmp_path``) and calls the sink as the protocol does:
``prepare`` once, then ``check``/``commit``/``abort``/``rewind`` with deterministic rows
(``epoch_rows``). What it writes is read back through the sink's own ``read_back`` when the
sink declares ``SupportsReadBack``; a check that needs a capability the sink does not declare
is skipped, saying which. Override ``refused_rows`` to check that ``check`` refuses, before
anything is written, rows the sink cannot take.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from eos.core import sink as core_sink
from eos.core.config import PipelineConfig
from eos.core.errors import ProtocolViolation, SinkCannotTake, TransientError
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import Sink, SinkCommit, SupportsReadBack, SupportsRewind, register
from eos.testing.rows import contract_pipeline, epoch_rows, rows_identity, schema_of

__all__ = ["SinkContract"]

PLAN_HASH = "0123456789abcdef"  # the plan hash every commit of the kit carries
RACE_RETRIES = 5  # a racing attempt that failed transiently is retried this often


class SinkContract:
    """The checks every sink passes; subclass it and implement ``sink_spec``."""

    #: A sink class to ``register`` for each test (its ``kind`` is the key of ``sink_spec``);
    #: None: the kind is found as installed (the ``eos.sinks`` entry points).
    sink_type: ClassVar[type[Sink] | None] = None
    #: The output the sink serves in the test pipeline: ``windows``, ``late`` or ``quarantine``.
    output: ClassVar[str] = "windows"
    #: Rows per epoch the tests commit.
    rows_per_epoch: ClassVar[int] = 3

    # -- what a subclass provides ---------------------------------------------------------------

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        """The sink's entry in the pipeline config (``{"delta": str(directory / "t")}``), with
        anything it writes under ``directory`` (the test's own temporary directory)."""
        raise NotImplementedError("a SinkContract subclass implements sink_spec(directory)")

    def pipeline_sections(self, directory: Path) -> dict[str, Any]:
        """Top-level sections of the test pipeline to replace (``{"kafka": {...}}``: where a
        Kafka-writing sink's broker is, by its client settings). Default: none."""
        return {}

    def make_sink(self, config: PipelineConfig) -> Sink:
        """A new instance of the sink under test for ``config``: each call is another client
        (another process's attempt). Default: the sink the pipeline configures."""
        return next(s for s in core_sink.sinks_for(config) if s.output == self.output)

    def refused_rows(self, config: PipelineConfig, sink: Sink) -> pa.Table | None:
        """Rows of an epoch that ``sink`` (prepared, holding epoch 0) cannot take, which its
        ``check`` must refuse with ``SinkCannotTake`` (a column of another type than its
        table's, a record over its size limit); None (default): skip that test."""
        return None

    # -- the test's pipeline --------------------------------------------------------------------

    @pytest.fixture
    def contract_config(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineConfig:
        """The test's pipeline, with ``sink_type`` registered while it runs."""
        if self.sink_type is not None:
            monkeypatch.setattr(core_sink, "_registered", dict(core_sink._registered))
            register(self.sink_type.kind, self.sink_type)
        return contract_pipeline(tmp_path, self.sink_spec(tmp_path), self.output,
                                 **self.pipeline_sections(tmp_path))

    # -- helpers --------------------------------------------------------------------------------

    def rows(self, config: PipelineConfig, epoch: int) -> pa.Table:
        return epoch_rows(config, epoch, self.rows_per_epoch, self.output)

    def prepared(self, config: PipelineConfig) -> Sink:
        sink = self.make_sink(config)
        sink.prepare(schema_of(config, self.output))
        return sink

    def commit(self, sink: Sink, epoch: int) -> SinkCommit:
        done = sink.commit(epoch, self.rows(sink.config, epoch), PLAN_HASH)
        assert isinstance(done, SinkCommit), f"commit returned {done!r}, not a SinkCommit"
        return done

    def committed(self, config: PipelineConfig, *epochs: int) -> Sink:
        """A prepared sink holding ``epochs`` (0, 1, ...), each committed by this attempt."""
        sink = self.prepared(config)
        for epoch in epochs:
            done = self.commit(sink, epoch)
            assert done.outcome is Outcome.COMMITTED, (
                f"the first commit of epoch {epoch} answered {done.outcome}, not committed")
        return sink

    def expected(self, config: PipelineConfig, *epochs: int) -> Counter[tuple]:
        schema = schema_of(config, self.output)
        total: Counter[tuple] = Counter()
        for epoch in epochs:
            total += rows_identity(schema, self.rows(config, epoch))
        return total

    def held(self, sink: Sink, since: int = 0) -> Counter[tuple] | None:
        """What the sink holds of epochs ``since..``, read back through a new instance; None
        when it cannot be read back."""
        reader = self.make_sink(sink.config)
        if not isinstance(reader, SupportsReadBack):
            return None
        return rows_identity(schema_of(sink.config, self.output), reader.read_back(since))

    def assert_holds(self, sink: Sink, *epochs: int) -> None:
        """The sink holds exactly ``epochs``: its marker says the last, a new instance reads
        the same, and (read back) each of their rows is there once and nothing else is."""
        last = epochs[-1] if epochs else NO_EPOCH
        assert sink.committed_epoch() == last
        assert self.make_sink(sink.config).committed_epoch(fence=False) == last
        found = self.held(sink)
        if found is not None:
            assert found == self.expected(sink.config, *epochs), (
                f"read_back does not hold exactly the rows of epochs {list(epochs)}")

    @staticmethod
    def needs(sink: Sink, capability: type[Any]) -> None:
        if not isinstance(sink, capability):
            pytest.skip(f"{type(sink).__name__} does not declare {capability.__name__}")

    # -- the contract ---------------------------------------------------------------------------

    def test_a_new_sink_holds_no_epoch(self, contract_config: PipelineConfig) -> None:
        sink = self.make_sink(contract_config)
        assert sink.committed_epoch(fence=False) == NO_EPOCH
        sink.prepare(schema_of(contract_config, self.output))
        sink.prepare(schema_of(contract_config, self.output))  # idempotent
        self.assert_holds(sink)

    def test_an_epoch_is_committed_once(self, contract_config: PipelineConfig) -> None:
        """A second commit of an epoch the sink holds, from this instance or another one (a
        retry after a crash), answers ALREADY_COMMITTED and writes nothing."""
        sink = self.committed(contract_config, 0)
        self.assert_holds(sink, 0)
        for attempt in (sink, self.make_sink(contract_config)):
            again = self.commit(attempt, 0)
            assert again.outcome is Outcome.ALREADY_COMMITTED
            assert not again.outcome.wrote
        self.assert_holds(sink, 0)
        self.commit(sink, 1)
        assert self.commit(self.make_sink(contract_config), 0).outcome is (
            Outcome.ALREADY_COMMITTED)  # an older epoch too
        self.assert_holds(sink, 0, 1)

    def test_epochs_are_committed_in_order(self, contract_config: PipelineConfig) -> None:
        """An epoch that does not follow the one the sink holds is refused
        (``ProtocolViolation``), and nothing of it is written."""
        sink = self.prepared(contract_config)
        with pytest.raises(ProtocolViolation):
            self.commit(sink, 1)  # a sink that holds nothing starts at epoch 0
        self.assert_holds(sink)
        self.commit(sink, 0)
        with pytest.raises(ProtocolViolation):
            self.commit(sink, 2)
        self.assert_holds(sink, 0)
        assert self.commit(sink, 1).outcome is Outcome.COMMITTED
        self.assert_holds(sink, 0, 1)

    def test_committed_epoch_follows_the_commits(self, contract_config: PipelineConfig) -> None:
        """Read from the sink itself: a new instance answers the same, fenced or not."""
        sink = self.prepared(contract_config)
        for epoch in range(3):
            self.commit(sink, epoch)
            for reader in (sink, self.make_sink(contract_config)):
                assert reader.committed_epoch() == epoch
                assert reader.committed_epoch(fence=False) == epoch
        self.assert_holds(sink, 0, 1, 2)

    def test_an_aborted_epoch_leaves_nothing(self, contract_config: PipelineConfig) -> None:
        """``abort`` of the next epoch leaves nothing of it and can be repeated; ``abort`` of a
        committed epoch never touches it; the aborted epoch then commits as usual."""
        sink = self.committed(contract_config, 0)
        for _ in range(2):
            sink.abort(1)
            self.make_sink(contract_config).abort(1)
        sink.abort(0)  # committed: untouched
        self.assert_holds(sink, 0)
        assert self.commit(self.make_sink(contract_config), 1).outcome is Outcome.COMMITTED
        self.assert_holds(sink, 0, 1)

    def test_two_commits_of_one_epoch_at_once_write_it_once(
            self, contract_config: PipelineConfig) -> None:
        """Two attempts (two instances, as two processes) commit each epoch at the same moment:
        one writes it, the other answers ALREADY_COMMITTED (or fails transiently, and its
        retry answers ALREADY_COMMITTED)."""
        self.prepared(contract_config)
        for epoch in range(3):
            attempts = [self.make_sink(contract_config) for _ in range(2)]
            outcomes = _race([lambda s=s, e=epoch: self.commit(s, e) for s in attempts])
            for i, result in enumerate(outcomes):
                for _ in range(RACE_RETRIES):
                    if not isinstance(result, TransientError):
                        break
                    result = _attempt(lambda s=attempts[i], e=epoch: self.commit(s, e))
                if isinstance(result, BaseException):
                    raise result
                outcomes[i] = result
            written = [o.outcome for o in outcomes]
            assert sorted(written) == sorted([Outcome.COMMITTED, Outcome.ALREADY_COMMITTED]), (
                f"two attempts at epoch {epoch} answered {written}: exactly one writes")
        self.assert_holds(self.make_sink(contract_config), 0, 1, 2)

    def test_check_takes_the_rows_and_writes_nothing(
            self, contract_config: PipelineConfig) -> None:
        sink = self.committed(contract_config, 0)
        self.make_sink(contract_config).check(1, self.rows(contract_config, 1))
        self.assert_holds(sink, 0)

    def test_check_refuses_what_the_sink_cannot_take_before_anything_is_written(
            self, contract_config: PipelineConfig) -> None:
        sink = self.committed(contract_config, 0)
        refused = self.refused_rows(contract_config, sink)
        if refused is None:
            pytest.skip(f"{type(self).__name__}.refused_rows gives no rows the sink cannot take")
        with pytest.raises(SinkCannotTake):
            self.make_sink(contract_config).check(1, refused)
        self.assert_holds(sink, 0)
        assert self.commit(sink, 1).outcome is Outcome.COMMITTED  # the good rows still go
        self.assert_holds(sink, 0, 1)

    def test_a_rewind_to_k_leaves_the_epochs_up_to_k(
            self, contract_config: PipelineConfig) -> None:
        """After ``rewind(1)`` the sink holds epochs 0 and 1 only (a sink that ``withdraws``:
        read back; one that does not: its marker), again after a rerun of the same rewind,
        and the next epochs commit again on top of them."""
        sink = self.committed(contract_config, 0, 1, 2)
        self.needs(sink, SupportsRewind)
        assert isinstance(sink, SupportsRewind)
        rewind_id = f"kit-{uuid.uuid4().hex[:8]}"
        schema = schema_of(contract_config, self.output)
        target = sink.rewind_target(1)
        sink.rewind(1, target, rewind_id, schema)
        again = self.make_sink(contract_config)
        assert isinstance(again, SupportsRewind)
        again.rewind(1, target, rewind_id, schema)  # a rerun: nothing more happens
        assert sink.committed_epoch() == 1
        if sink.withdraws:
            self.assert_holds(sink, 0, 1)
            reader = self.make_sink(contract_config)
            if isinstance(reader, SupportsReadBack):
                assert reader.commits() == [0, 1]
        assert self.commit(self.make_sink(contract_config), 2).outcome is Outcome.COMMITTED
        assert sink.committed_epoch() == 2
        if sink.withdraws:
            self.assert_holds(sink, 0, 1, 2)

    def test_a_rewind_to_before_the_first_epoch_empties_the_sink(
            self, contract_config: PipelineConfig) -> None:
        sink = self.committed(contract_config, 0, 1)
        self.needs(sink, SupportsRewind)
        assert isinstance(sink, SupportsRewind)
        target = sink.rewind_target(NO_EPOCH)
        sink.rewind(NO_EPOCH, target, f"kit-{uuid.uuid4().hex[:8]}",
                    schema_of(contract_config, self.output))
        assert sink.committed_epoch() == NO_EPOCH
        if sink.withdraws:
            self.assert_holds(sink)
        assert self.commit(self.make_sink(contract_config), 0).outcome is Outcome.COMMITTED
        if sink.withdraws:
            self.assert_holds(sink, 0)

    def test_read_back_since_returns_the_rows_of_the_epochs_from_since(
            self, contract_config: PipelineConfig) -> None:
        sink = self.committed(contract_config, 0, 1, 2)
        self.needs(sink, SupportsReadBack)
        assert isinstance(sink, SupportsReadBack)
        if sink.unreadable() is not None:
            pytest.skip(f"the sink cannot be read back here: {sink.unreadable()}")
        for since in (0, 1, 2, 3):
            assert self.held(sink, since) == self.expected(
                contract_config, *range(since, 3)), f"read_back({since})"
        assert sink.commits() == [0, 1, 2]


def _attempt(call: Any) -> Any:
    try:
        return call()
    except BaseException as error:  # handed to the test's thread
        return error


def _race(calls: list[Any]) -> list[Any]:
    """Run ``calls`` in threads released together; each one's result or error, in order."""
    results: list[Any] = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i: int) -> None:
        barrier.wait()
        results[i] = _attempt(calls[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
