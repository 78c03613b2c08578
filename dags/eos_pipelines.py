"""eos: the DAGs of every pipeline in the pipelines directory."""

from eos.airflow import pipeline_dags

globals().update(pipeline_dags())
