"""Where a ``postgres`` sink's credentials come from, without importing Airflow.

Under Airflow, the task reads the sink's Airflow ``postgres`` connection
(``eos.airflow.connections.export_postgres_connections``) and hands this process its libpq
DSN with ``supply_dsn``; on the command line the sink's ``dsn_env`` names an environment
variable holding one. The DSN holds the password: it is kept in this module only, never in
the sink's options, its name, a log line or an error (``redact`` takes it out of a driver's
message).
"""

from __future__ import annotations

import os
import threading

from eos.core.errors import ConfigError

__all__ = ["dsn_for", "forget_dsns", "redact", "supply_dsn"]

_supplied: dict[str, str] = {}  # Airflow connection id -> DSN
_lock = threading.Lock()


def supply_dsn(conn_id: str, dsn: str) -> None:
    """Give this process the DSN of Airflow connection ``conn_id`` (the airflow layer)."""
    with _lock:
        _supplied[conn_id] = dsn


def forget_dsns() -> None:
    with _lock:
        _supplied.clear()


def dsn_for(conn_id: str, dsn_env: str | None) -> str:
    """The DSN of a sink: its Airflow connection's when one was supplied, else the value of its
    ``dsn_env`` variable; a ``ConfigError`` saying how to provide one otherwise."""
    with _lock:
        supplied = _supplied.get(conn_id)
    if supplied:
        return supplied
    value = os.environ.get(dsn_env, "").strip() if dsn_env else ""
    if value:
        return value
    where = f"set {dsn_env} to a libpq DSN" if dsn_env else (
        "name an environment variable holding a libpq DSN in the sink's dsn_env")
    raise ConfigError(f"no PostgreSQL connection: create the Airflow connection '{conn_id}' "
                      f"(type postgres), or {where}")


def redact(text: str, dsn: str) -> str:
    """``text`` with the DSN's password (and the DSN itself) replaced by ``***``."""
    from psycopg.conninfo import conninfo_to_dict

    secrets = [dsn]
    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:  # an unparsable DSN: only the whole of it is known to be secret
        password = None
    if password:
        secrets.append(str(password))
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
