"""Which broker a pipeline talks to, found without touching Kafka (no client library imported).

Resolution is the same everywhere: ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the address the
embedded broker published in its state file (``eos broker start``), else nothing. It lives apart
from ``eos.core.kafka`` because the DAG file needs it at parse time (asset names,
``eos.core.lineage``), where importing the Kafka client is not allowed.
"""

from __future__ import annotations

import json
import os
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
