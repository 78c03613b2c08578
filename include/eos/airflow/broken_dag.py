"""The placeholder DAG of a pipeline file that does not load (``eos.airflow.dag_factory``).

Raising out of the DAG file would make Airflow drop every eos DAG and show one import error for
the DAG file, not for the YAML at fault. Instead each broken file gets a DAG of its own that
says what is wrong where an operator looks (the DAG list's description, the DAG's docs, the tags
``eos-broken``), cannot run by itself (paused on creation, no schedule), and whose one task
fails with the loader's ``ConfigError`` when someone triggers it anyway. The error's text is the
loader's, which never quotes the file (an inline secret would reach the UI)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from itertools import chain, count
from pathlib import Path

from airflow.sdk import DAG, task

from eos.airflow.pipeline_dag import START_DATE
from eos.core.errors import ConfigError

BROKEN_TAG = "eos-broken"
BROKEN_SUFFIX = "__broken"  # when a good pipeline's DAG already holds eos_<stem>
TASK_ID = "config_error"
_NOT_IN_DAG_ID = re.compile(r"[^A-Za-z0-9_.-]")  # Airflow refuses a DAG id with these

BROKEN_DOC = """
### Broken pipeline file
`{path}` does not load, so this placeholder stands in for its pipeline's DAGs: it is paused,
has no schedule, and its one task fails with the error below. The other pipelines' DAGs are
not affected.

```text
{error}
```

Fix the file (`eos validate` checks it before a deploy); at the DAG file's next parse this
placeholder is gone and the pipeline's own DAGs appear.
"""


@dataclass(frozen=True)
class BrokenPipeline:
    """A file of the pipelines directory and why it yields no pipeline."""

    path: Path
    error: ConfigError


def placeholder_id(path: Path, taken: Collection[str]) -> str:
    """``eos_<stem>`` (what the file's DAG would be called when its name is its stem), else with
    ``__broken`` (then a number) appended: a good pipeline's DAG keeps its id."""
    base = "eos_" + _NOT_IN_DAG_ID.sub("_", path.stem)
    candidates = chain([base], (f"{base}{BROKEN_SUFFIX}{n if n > 1 else ''}" for n in count(1)))
    return next(dag_id for dag_id in candidates if dag_id not in taken)


def build_broken_dag(broken: BrokenPipeline, dag_id: str) -> DAG:
    """The placeholder of one broken file (see the module's docstring)."""
    message = broken.error.message

    with DAG(
        dag_id=dag_id,
        description=f"broken pipeline file {broken.path.name}: {message}",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        is_paused_upon_creation=True,
        default_args={"owner": "eos", "retries": 0},  # a config error does not heal by retrying
        tags=["eos", BROKEN_TAG],
        doc_md=BROKEN_DOC.format(path=broken.path, error=message),
    ) as dag:

        @task(task_id=TASK_ID)
        def config_error() -> None:
            """Fail with the loader's error, so whoever triggers this DAG reads why."""
            raise ConfigError(message)

        config_error()
    return dag
