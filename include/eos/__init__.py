"""Exactly-once micro-batches: Kafka -> Spark -> Delta Lake, one Airflow DAG run per epoch.

The protocol (plan, pre-commit, commit, abort, recover) lives in this package once; the DAG file
a deployment writes (``eos.airflow.pipeline_dags``), the Spark app (``eos.compute.app``) and the
``eos`` command are thin callers.
"""

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    """The installed distribution's version: one number for the package, ``eos --version`` and
    the docs. A source tree on ``sys.path`` without the package installed reports ``0+unknown``."""
    try:
        return version("eos-pipeline")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
