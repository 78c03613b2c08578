"""Tests that need no broker, Spark, Airflow or object store (the fast tier), one package per
layer of eos."""
