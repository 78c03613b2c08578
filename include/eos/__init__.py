"""Exactly-once micro-batches: Kafka -> Spark -> Delta Lake, one Airflow DAG run per epoch.

The protocol (plan, pre-commit, commit, abort, recover) lives in this package once; the DAG
files in ``dags/``, the Spark app in ``spark_apps/`` and the ``eos`` command are thin callers.
"""

__version__ = "0.1.0"
