"""Object-store credentials from an Airflow connection, for the tasks of a pipeline whose tables
live on a store (``eos.core.storage``).

delta-rs and pyarrow read the standard ``AWS_*`` variables themselves; in Airflow the operator
keeps them in a connection instead (``STORAGE_CONN_ID``, type ``aws`` as the Amazon provider
defines it: the access key as login, the secret as password, ``endpoint_url`` and
``region_name`` in extra). Each task exports them into its own process environment before a
phase runs, and the triggerer into its own before the readers it runs read the tables
(``aexport_credentials``: the data-driven epochs' trigger, the stall alert's callback): they
are never logged, never put in XCom, and never reach Spark (executors write with their own
environment: docs/deploying.md, "Spark"). Without the connection, the process's environment (or an
instance role) is used as is.
"""

from __future__ import annotations

import os
from typing import Any

STORAGE_CONN_ID = os.environ.get("EOS_STORAGE_CONN_ID", "eos_object_store")


def connection_env(conn: Any) -> dict[str, str]:
    """The ``AWS_*`` variables an ``aws`` connection stands for (only those it sets)."""
    extra = conn.extra_dejson or {}
    env: dict[str, str] = {}
    if conn.login:
        env["AWS_ACCESS_KEY_ID"] = conn.login
    if conn.password:
        env["AWS_SECRET_ACCESS_KEY"] = conn.password
    endpoint = extra.get("endpoint_url") or (extra.get("service_config", {})
                                             .get("s3", {}).get("endpoint_url"))
    if endpoint:
        env["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            env["AWS_ALLOW_HTTP"] = "true"
    if extra.get("region_name"):
        env["AWS_REGION"] = str(extra["region_name"])
    if extra.get("aws_session_token"):
        env["AWS_SESSION_TOKEN"] = str(extra["aws_session_token"])
    return env


def export_credentials(conn_id: str = STORAGE_CONN_ID) -> bool:
    """Put the connection's credentials into this task process's environment; False when no
    such connection exists (the environment is then used as it is)."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # AirflowNotFoundException: no connection, the environment decides
        return False
    os.environ.update(connection_env(conn))
    return True


async def aexport_credentials(conn_id: str = STORAGE_CONN_ID) -> bool:
    """``export_credentials`` for the triggerer's readers of the tables (the data-driven epochs'
    trigger, the stall alert's callback), which run on its event loop, not in a task.

    The triggerer reads a connection through its supervisor with a synchronous call that
    routes itself back onto the event loop, so it must run neither on the loop's thread nor in
    a plain worker thread (``asyncio.to_thread``: the call then never reaches the supervisor
    and the connection looks absent): ``sync_to_async`` gives it the thread it needs.
    ``BaseHook.aget_connection`` is no way out on Airflow 3.1: it masks the secret with the
    same synchronous call, on the loop."""
    from asgiref.sync import sync_to_async

    return bool(await sync_to_async(export_credentials)(conn_id))
