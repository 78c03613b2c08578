"""The at-least-once baselines as Airflow DAGs, for ``python -m bench.dag_runs`` only.

``bench_alo``, one task per run: what the consumer group's committed offsets say is new (up to
the pipeline's ``epoch.max_records``), read and aggregated by the same Spark code on the same
Spark Connect server, the windows appended to a Delta table, then the offsets committed to
Kafka. No staging, no state, no fence: a retry after the append writes the windows twice. The
pipeline file is ``EOS_BENCH_ALO_CONFIG`` (outside ``EOS_PIPELINES_DIR``, so no exactly-once
DAG is built for it).

``bench_alo_state``, one task per run: at-least-once *with state*, the fair baseline
(``bench.scenarios.StatefulALO``): from the offsets its own last checkpoint row recorded, the
same stager as eos's precommit (windows, watermark, late rows, quarantine, state carried), the
state made durable, the outputs appended to Delta, then its offsets row. Its pipeline file is
``EOS_BENCH_ALO_STATE_CONFIG``.
"""

import os

from airflow.sdk import DAG, task

with DAG("bench_alo", schedule=None, catchup=False, max_active_runs=1, tags=["bench"]):

    @task
    def alo_epoch() -> dict:
        from bench.dag_runs import alo_task

        return alo_task(os.environ["EOS_BENCH_ALO_CONFIG"])

    alo_epoch()


with DAG("bench_alo_state", schedule=None, catchup=False, max_active_runs=1, tags=["bench"]):

    @task
    def alo_state_epoch() -> dict:
        from bench.dag_runs import alo_state_task

        return alo_state_task(os.environ["EOS_BENCH_ALO_STATE_CONFIG"])

    alo_state_epoch()
