"""Airflow plugin: the "Exactly-once epochs" view under Browse (see ``eos.airflow.epochs_view``).

Registered through the package's ``airflow.plugins`` entry point: every Airflow component of an
environment eos is installed in loads it, with no file in a plugins folder. It only registers;
the app, its pages and its security live in ``eos.airflow.epochs_view`` and ``epochs_app``."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from eos.airflow.epochs_view import EXTERNAL_VIEW


class EpochsViewPlugin(AirflowPlugin):
    name = "eos_epochs"
    external_views = [EXTERNAL_VIEW]  # noqa: RUF012 (Airflow reads plugin attributes as lists)

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        # Built when the API server asks, not when a task process loads plugins.
        from eos.airflow.epochs_app import fastapi_app

        return [fastapi_app()]
