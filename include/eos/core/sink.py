"""The two-phase-commit sink contract (docs/sinks.md), after Flink's
``TwoPhaseCommitSinkFunction``
and Sink V2: a small committer, and what else a sink can do as separate capabilities.

The pre-commit half is shared by every sink: ``precommit`` stages epoch N's rows in Delta
staging in one transaction, so "pre-committed" means durable, deterministic rows that any
number of commit attempts can read. What a sink implements is the commit half (``Sink``):

- ``committed_epoch()``: the last epoch the sink holds, read from the sink itself.
- ``commit(epoch, rows)``: write N's rows and N's marker in one atomic step, exactly once.
- ``check(epoch, rows)`` (optional): before the commit seals N, prove that the commit can only
  fail transiently, so that a sealed epoch always commits.
- ``abort(epoch)``: discard what the sink prepared for N and did not commit.

A sink that can do more says so by also implementing a capability, like Flink's
``SupportsCommitter`` / ``SupportsWriterState``: ``SupportsRewind`` (a rewind may take it
back), ``SupportsReadBack`` (the audit reads what it holds), ``SupportsFill`` (a sink added
later takes the epochs before it), ``SupportsPathRules`` (records whose values it cannot name
a path with are quarantined at precommit), ``SupportsAssets`` (Airflow publishes an asset when
it commits). Without them a sink still commits exactly once; a
rewind refuses a pipeline with a sink that cannot rewind, the audit reports it unaudited and
no asset is published for it.

The protocol core (``eos.core.protocol``) calls these; a sink never decides whether an epoch is
committed as a whole (that is the checkpoint's job), only whether *it* holds the epoch. Sink
types are found by name through the ``eos.sinks`` entry points (``sink_class``), or registered
in-process (``register``): the core imports no sink module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from eos.core.outcomes import NO_EPOCH, Outcome

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.core.config import PipelineConfig
    from eos.core.path_rules import PathRule

__all__ = ["PIPELINE_ROOT", "Sink", "SinkCommit", "SupportsAssets", "SupportsPathRules",
           "SupportsReadBack", "SupportsRewind", "register", "sink_class", "sink_name",
           "sinks_for"]

ENTRY_POINTS = "eos.sinks"  # the entry-point group naming sink types (pyproject.toml)
# In a resource (``Sink.resources``): the pipeline's table root, which the config resolves, so
# that a place under it named relatively and by its absolute path is one resource.
PIPELINE_ROOT = "{root}"

Options = TypeVar("Options", bound=BaseModel)


def validated_options(model: type[Options], data: Any, what: str) -> Options:
    """A sink's options as its typed value, or a ValueError naming every problem: ``what``
    starts the message (the config loader adds where in the file)."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                             for e in error.errors())
        raise ValueError(f"{what}: {problems}") from None


@dataclass(frozen=True)
class SinkCommit:
    """What one ``Sink.commit`` call did."""

    sink: str
    outcome: Outcome  # COMMITTED (this attempt wrote) or ALREADY_COMMITTED
    rows: int
    version: int | None = None  # the sink's own version of the write (Delta version, offset)
    raced: bool = False  # found committed only after losing a race to a concurrent attempt


class Sink(ABC):
    """One destination of one output (``windows``, ``late`` or ``quarantine``) of a pipeline."""

    kind: ClassVar[str]  # the key in the pipeline config, e.g. ``delta``
    #: Whether ``SinkCommit.version`` is a table version (a Delta table's): the epoch's phase
    #: line reports those as ``delta_versions``; a Kafka sink's version is an offset.
    versions_tables: ClassVar[bool] = False

    def __init__(self, config: PipelineConfig, output: str, options: Any) -> None:
        self.config = config
        self.output = output
        self.options = options
        # The epoch this sink joined its pipeline at: it holds none before it. 0 for a sink
        # there from the start; a sink added to a running pipeline joins at the epoch after
        # the last checkpoint (``eos.core.protocol.authority.join_sinks``).
        self.joined_at = 0

    def follows(self, held: int, epoch: int) -> bool:
        """Whether ``epoch`` is the next epoch for this sink while it holds ``held``: the one
        after it, or, holding none, the epoch it joined at. A sink's commit refuses any other
        (epochs are committed in order, one at a time)."""
        return held == epoch - 1 or (held == NO_EPOCH and epoch == self.joined_at)

    @classmethod
    def parse_options(cls, options: Any) -> Any:
        """Validate the config value of this sink type (raise ValueError naming the problem);
        return the typed value the sink keeps as ``options``. Default: the value as given.

        Called while the pipeline config loads: a bad sink fails at load time, not at commit.
        It runs when the DAG file is parsed, so it imports no client library.
        """
        return options

    @classmethod
    def resources(cls, options: Any, pipeline_name: str) -> frozenset[str]:
        """what this sink writes exclusively (e.g. a marker partition, a table): two sinks of
        one pipeline may not claim one.

        Why: two sinks writing one place read each other's markers and answer "already
        committed" for epochs they never wrote, losing them silently. Each resource is one
        string, e.g. ``kafka-topic:<marker topic>`` or ``eos.core.layout.table_resource(...)``
        (table locations also collide when one holds the other, and with the pipeline's
        protocol tables); a place under the pipeline's table root starts with
        ``PIPELINE_ROOT``. Called while the config loads: no I/O. Default: nothing."""
        return frozenset()

    @classmethod
    def topics_written(cls, options: Any, pipeline_name: str) -> frozenset[str]:
        """The Kafka topics this sink writes (its output and marker topics), so a pipeline
        whose source names or matches one is refused when it loads: it would read its own
        output back as input, an epoch's records feeding the next epoch without end. Called
        while the config loads: no I/O. Default: none."""
        return frozenset()

    @classmethod
    def check_pipeline(cls, options: Any, config: PipelineConfig, output: str) -> None:
        """Refuse (raise ValueError naming the problem) a pipeline this sink could not serve
        for ``output`` whatever its records hold, e.g. one whose largest record could outgrow
        the sink's record limit: one record would then halt the pipeline for good. Called
        while the config loads: no I/O. Default: every pipeline is fine."""
        return None

    @classmethod
    def describe(cls, options: Any) -> str:
        """The part of the sink's name after ``kind:``; unique per pipeline. Default: the
        options as text."""
        return str(options)

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.describe(self.options)}"

    @abstractmethod
    def committed_epoch(self, fence: bool = True) -> int:
        """The last epoch this sink holds for this pipeline, ``-1`` if none.

        Read from the sink itself (its marker), never from a cache or from the epoch log, and
        (``fence``) after fencing any earlier writer where the sink supports it, so that the
        answer cannot be changed afterwards by a zombie of an earlier attempt. ``fence=False``
        only looks (status views): the answer may then be overtaken by a commit in flight.
        Raises ``TransientError`` when the sink cannot be reached (the caller retries).
        """

    @abstractmethod
    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """Make epoch ``epoch``'s rows visible exactly once, with the marker of ``epoch``.

        If the sink already holds ``epoch`` (``committed_epoch() >= epoch``), do nothing and
        report ``ALREADY_COMMITTED``. Otherwise write every row and the marker in **one** atomic
        step. Safe when two attempts race: exactly one writes, the other reports
        ``ALREADY_COMMITTED`` (``raced=True``). The sink must hold ``epoch - 1`` (or more):
        anything else is a ``ProtocolViolation``.

        On failure nothing of ``epoch`` is visible and the error is a ``TransientError`` (the
        caller retries this same call: after a successful precommit a commit must eventually
        succeed) or a ``PermanentError`` (the task fails at once with the message).
        """

    def check(self, epoch: int, rows: pa.Table) -> None:  # noqa: B027 - optional hook
        """Prove that ``commit(epoch, rows)`` can only fail transiently; raise
        ``SinkCannotTake`` naming what it cannot take otherwise (docs/guarantees.md).

        Called for every sink before the commit seals ``epoch``, while an abort is still
        possible: after the seal the commit must eventually succeed, so every deterministic
        failure (a value the sink cannot encode, a conflicting table schema, a record over a
        size limit, a schema the registry refuses) belongs here, not in ``commit``. Work done
        here may be kept for the ``commit`` call on the same object (encoded records). Reads
        only; writes nothing a consumer can see. Default: every row can be taken."""

    @abstractmethod
    def abort(self, epoch: int) -> None:
        """Discard anything this sink prepared for ``epoch`` and did not commit.

        Never touches a committed epoch. Sinks whose commit is one atomic step leave nothing
        behind on failure, so for them this only has to be safe to call.
        """

    def prepare(self, schema: pa.Schema) -> None:  # noqa: B027 - optional hook
        """Create what the sink needs to exist (a table, a topic) and fail early when it cannot
        be (``begin`` calls it before any epoch). Idempotent; default: nothing to create."""


# -- capabilities a sink may add ----------------------------------------------------------------
#
# Each is a Sink with more to implement; a sink type lists the capabilities it has, e.g.
# ``class DeltaSink(SupportsRewind, SupportsReadBack, SupportsAssets)``.

class SupportsRewind(Sink):
    """A sink a rewind can take back to an earlier epoch (``eos.core.rewind``)."""

    #: Whether ``rewind`` takes committed rows back (a Delta table restores an older version).
    #: A sink that cannot (a Kafka topic: what is published stays published) is rewound only
    #: when the user accepts that its consumers see the replayed epochs a second time.
    withdraws: ClassVar[bool] = True

    @abstractmethod
    def rewind_target(self, epoch: int) -> int | None:
        """Where ``rewind(epoch)`` will take this sink (a table version; None for a sink with
        no versions), found and checked before anything of the rewind is written: raises
        ``RewindRefused`` when the sink cannot go back to ``epoch`` (its history is gone)."""

    @abstractmethod
    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """Make the sink hold epochs ``..epoch`` only, with its marker saying ``epoch``, in one
        atomic step (``epoch`` is -1: nothing of the pipeline's). ``schema`` is the output's
        schema under the current config (a full replay may have changed it).

        Idempotent per ``rewind_id``: a rerun after a crash, or a concurrent attempt, finds the
        sink rewound and does nothing. Returns the sink's version written, None if nothing was.
        A sink that does not ``withdraw`` writes only the marker: the next commits republish.
        """


class SupportsReadBack(Sink):
    """A sink the audit (``eos verify``) can read back and compare with its own recomputation."""

    def unreadable(self) -> str | None:
        """Why ``read_back`` cannot tell this pipeline's rows apart here (the audit then
        reports the sink unaudited, saying why, instead of other writers' rows as problems);
        None: it can. Default: None."""
        return None

    def kept_by(self) -> tuple[str, ...]:
        """The columns of which the sink keeps one row, the latest epoch's (an upsert): the
        protocol hands the sink each key's last row of an epoch (``eos.core.upserts``), and
        the audit expects, per value of them, that row of the last epoch that wrote it. Empty:
        every committed row is kept. Default: empty."""
        return ()

    @abstractmethod
    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        """Every committed row of this pipeline of epoch ``since`` or later, typed as the
        output's schema (for the audit). ``since`` lets an audit of the last epochs hold only
        theirs: a sink filters where it reads (a predicate on ``epoch``), not after."""

    @abstractmethod
    def commits(self) -> list[int]:
        """The epoch of every commit this sink still has a record of, oldest first, on its
        current line: a rewind to N drops the commits after N (they are replayed). A sink may
        forget old ones (a compacted marker topic keeps the last); it never holds one twice.
        The audit expects a contiguous run ending at the last checkpoint."""


class SupportsPathRules(Sink):
    """A sink that names paths with a column's values (a partitioned table): the records whose
    values no path of it can hold are quarantined at precommit, before the seal, instead of
    failing its commit (``eos.core.path_rules``)."""

    @abstractmethod
    def path_rules(self) -> list[PathRule]:
        """One rule per string column the sink names paths with; the other columns' values
        counted at their widest, so that values within every rule always fit together."""


class SupportsFill(Sink):
    """A sink added to a running pipeline that can take the epochs committed before it joined
    (``eos fill``, ``eos.core.fill``): each once, in order, under a marker of its own beside
    the sink's, so ``committed_epoch`` keeps following the pipeline while earlier epochs are
    filled in. The rows come from another sink of the same output that holds them."""

    @abstractmethod
    def filled(self) -> tuple[int, int] | None:
        """The epochs ``(first, last)`` filled so far; None: none."""

    @abstractmethod
    def fill(self, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
        """Write an epoch committed before the sink joined exactly once (nothing when it holds
        it already: ``ALREADY_COMMITTED``), in order from ``first``, which the first write
        records."""


def check_fill_order(sink: str, last: int, epoch: int, first: int) -> None:
    """A fill writes its epochs in order: ``epoch`` must follow ``last``, the last epoch the
    fill's marker holds, or be the fill's ``first`` when it holds none (``ProtocolViolation``
    otherwise: a fill that skipped an epoch could never be told complete)."""
    if last != epoch - 1 and not (last == NO_EPOCH and epoch == first):
        from eos.core.errors import ProtocolViolation

        raise ProtocolViolation(f"sink {sink} is filled up to epoch {last}; it cannot be "
                                f"filled with epoch {epoch}")


class SupportsAssets(Sink):
    """A sink Airflow publishes as an asset when an epoch commits to it."""

    @abstractmethod
    def asset_uri(self) -> str | None:
        """The Airflow Asset URI published when an epoch commits, named as OpenLineage names the
        dataset (``eos.core.lineage``), or None when it cannot be named where it is asked (a
        Kafka sink where no broker is configured). No I/O but the environment: used at DAG
        parse."""

    def asset_unnamed(self) -> str:
        """Why ``asset_uri`` is None here, for the log line that says no asset is published."""
        return "it cannot be named in this process"


# -- sink types ---------------------------------------------------------------------------------

_registered: dict[str, type[Sink]] = {}


def register(kind: str, cls: type[Sink]) -> None:
    """Make sink type ``kind`` known to this process without an entry point (a sink defined in
    a test or a notebook); an installed type of the same name is shadowed."""
    _registered[kind] = cls


@cache
def _installed() -> dict[str, Any]:
    return {point.name: point for point in entry_points(group=ENTRY_POINTS)}


def sink_types() -> list[str]:
    return sorted({*_installed(), *_registered})


def sink_class(kind: str) -> type[Sink]:
    """The class implementing sink type ``kind``; a clear error naming the known types."""
    if kind in _registered:
        return _registered[kind]
    point = _installed().get(kind)
    if point is None:
        known = ", ".join(sink_types()) or "none (is the eos-pipeline package installed?)"
        raise ValueError(f"unknown sink type '{kind}'; known: {known}")
    cls = point.load()
    if not (isinstance(cls, type) and issubclass(cls, Sink)):
        raise ValueError(f"sink type '{kind}' ({point.value}) is not a Sink")
    return cls


def sink_name(spec: dict[str, Any]) -> str:
    """The stable name of a configured sink (``delta:target``, ``kafka:clicks-stats``)."""
    ((kind, options),) = spec.items()
    return f"{kind}:{sink_class(kind).describe(options)}"


def sinks_for(config: PipelineConfig) -> list[Sink]:
    """Every sink of a pipeline, in commit order (``SinksConfig.by_output``)."""
    sinks = []
    for output, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        sinks.append(sink_class(kind)(config, output, options))
    return sinks
