"""Which broker a pipeline talks to, found without touching Kafka (no client library imported).

Resolution is the same everywhere: the ``bootstrap.servers`` of the connection settings this
process was given (``supply_settings``: an Airflow ``kafka`` connection, read by ``eos.airflow``),
else ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the address the embedded broker published in its
state file (``eos broker start``), else nothing. It lives apart from ``eos.core.kafka`` because
the DAG file needs it at parse time (asset names, ``eos.core.lineage``), where importing the
Kafka client is not allowed.

Connection settings reach this process in one of two ways, and never through a command line or a
Spark option: the layer that read them calls ``supply_settings`` (an Airflow task, the
triggerer), or, in a child process that layer started (``spark-submit`` of the precommit app and
the local Spark executors it forks), ``SETTINGS_FILE_ENV`` names a file only this user can read
that holds them (``handed_to_children``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eos.core.config import data_dir
from eos.core.errors import KafkaUnavailable
from eos.core.processes import alive


def broker_state_path(base: Path | None = None) -> Path:
    return (base or data_dir()) / "broker.json"


def local_broker(base: Path | None = None) -> dict[str, Any] | None:
    """The broker a local supervisor (``eos broker start``) serves on this machine, as its state
    file says (``bootstrap``, ``pid``, its topics), or None when none is running (a stale file
    is ignored). It is how clients find the embedded broker when ``KAFKA_BOOTSTRAP_SERVERS`` is
    not set; the broker writes the file, this layer only reads it."""
    path = broker_state_path(base)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not alive(int(state.get("pid", -1))):
        return None
    return state


def configured_bootstrap() -> str | None:
    """The bootstrap list of this deployment, or None when no broker is configured."""
    supplied = supplied_settings().get("bootstrap.servers", "").strip()
    if supplied:
        return supplied
    explicit = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if explicit:
        return explicit
    state = local_broker()
    return None if state is None else str(state["bootstrap"])


def bootstrap_servers() -> str:
    """``configured_bootstrap``, or an error that says how to configure or start a broker."""
    found = configured_bootstrap()
    if found is None:
        raise KafkaUnavailable(
            "no Kafka broker configured: set KAFKA_BOOTSTRAP_SERVERS=host:port, "
            "or start the embedded broker with `eos broker start`"
        )
    return found


# -- connection settings supplied by the layer that reads them (Airflow) -----------------------

SETTINGS_FILE_ENV = "EOS_KAFKA_SETTINGS_FILE"
# Shown as they are: where the pipeline reads, as KAFKA_BOOTSTRAP_SERVERS is shown.
SHOWN_KEYS = frozenset({"bootstrap.servers"})
_supplied: tuple[str, dict[str, str]] | None = None


class Provided(str):
    """A client setting's value that came from outside the config (the environment, a
    connection), which may be a secret whatever its key is named.

    It is the value (a ``str``: librdkafka takes it as it is), and it carries ``template``,
    where it came from, which is all ``redact`` and ``repr`` ever show. The provenance travels
    with the value through any copy of the settings (``{**settings, ...}``), so no path that
    shows settings has to know where they came from."""

    template: str

    def __new__(cls, value: str, template: str) -> Provided:
        made = super().__new__(cls, value)
        made.template = template
        return made

    def __repr__(self) -> str:
        return repr(self.template)

    def __reduce__(self) -> tuple[type[Provided], tuple[str, str]]:
        return type(self), (str.__str__(self), self.template)


class FromConnection(Provided):
    """A setting read from a connection (``supply_settings``): shown as
    ``<Airflow connection 'kafka_default'>``, never as its value."""


def supply_settings(settings: dict[str, str] | None, source: str = "") -> None:
    """The Kafka client settings of this process's connection (``source`` names it in what is
    shown), or None to forget them: the base every client of this process starts from
    (``eos.core.kafka.client_settings``), its ``bootstrap.servers`` the broker it talks to."""
    global _supplied
    _supplied = None if settings is None else (source, dict(settings))


def supplied_settings() -> dict[str, str]:
    """This process's connection settings: those supplied to it, else those its parent handed
    to it (``SETTINGS_FILE_ENV``), else, when ``KAFKA_BOOTSTRAP_SERVERS`` names no other broker,
    those of the broker eos started on this machine (its state file's ``client``: Apache Kafka's
    SASL user), else none. Every value but ``bootstrap.servers`` is a ``FromConnection``."""
    found = _supplied or _handed_settings() or _local_broker_settings()
    if found is None:
        return {}
    source, settings = found
    return {k: v if k in SHOWN_KEYS else FromConnection(v, f"<{source}>")
            for k, v in settings.items()}


def _local_broker_settings() -> tuple[str, dict[str, str]] | None:
    """The client settings the local broker published (``eos broker start --apache-kafka``),
    unless the environment names another broker; the mock has none (no authentication)."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        return None
    state = local_broker()
    if state is None or not isinstance(state.get("client"), dict):
        return None
    settings = {"bootstrap.servers": str(state["bootstrap"]),
                **{str(k): str(v) for k, v in state["client"].items()}}
    return f"the broker at {state['bootstrap']} ({broker_state_path()})", settings


def _handed_settings() -> tuple[str, dict[str, str]] | None:
    """The settings a parent process handed to this one, or None (no file named, or gone: the
    parent's task ended; then this process has no connection settings)."""
    path = os.environ.get(SETTINGS_FILE_ENV, "").strip()
    if not path:
        return None
    try:
        handed = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return str(handed["source"]), {str(k): str(v) for k, v in handed["settings"].items()}


@contextmanager
def handed_to_children() -> Iterator[None]:
    """While it lasts, the child processes this one starts (``spark-submit`` and the local
    executors it forks) find this process's connection settings: in a file only this user can
    read, in a directory of its own, named by ``SETTINGS_FILE_ENV`` in this process's
    environment, which children inherit. Never on a command line (``ps`` shows it to every
    user, the task log prints it) nor in a Spark option (the UI and plans show them). The file
    is removed when the block ends. Without supplied settings, nothing changes."""
    if _supplied is None:
        yield
        return
    source, settings = _supplied
    previous = os.environ.get(SETTINGS_FILE_ENV)
    with tempfile.TemporaryDirectory(prefix="eos-kafka-") as scratch:  # mode 0700
        path = Path(scratch) / "settings.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"source": source, "settings": settings}, handle)
        os.environ[SETTINGS_FILE_ENV] = str(path)
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(SETTINGS_FILE_ENV, None)
            else:
                os.environ[SETTINGS_FILE_ENV] = previous
