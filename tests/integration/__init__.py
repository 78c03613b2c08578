"""Tests on a real broker, Spark, Airflow or the object store, one package per topic."""
