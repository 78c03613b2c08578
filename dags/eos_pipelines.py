"""Airflow DAG file: one DAG ``eos_<name>`` per pipeline config in include/pipelines/*.yaml.

Thin on purpose: the DAG shape is built by eos.airflow.dag_factory, the protocol lives in the eos
library.
Parsing reads the YAML files only (no Kafka, Spark or Delta access).
"""

from eos.airflow.dag_factory import build_dags

globals().update(build_dags())
