"""Airflow's local settings for this project: Airflow imports this module in every component
as it starts (the plugins folder is on ``sys.path``). The scheduler imports what the epoch's
tasks import once, so the tasks it forks do not (``eos.airflow.preload``). A deployment with
its own ``airflow_local_settings`` calls ``preload_in_scheduler()`` from it instead."""

from eos.airflow.preload import preload_in_scheduler

preload_in_scheduler()
