"""How a pipeline's Airflow DAG looks to the team that runs it: owner, tags, pool, queue,
retries, a failure callback, access control and docs (the ``airflow`` section).

Core only describes them (no Airflow import): ``eos.airflow.pipeline_dag`` applies them to the
generated DAG and its phase tasks. What the protocol itself needs stays as it is: ``commit``
retries until it succeeds whatever ``retries`` says (a pre-committed epoch must commit), and a
run still takes one epoch."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from eos.core.config.values import DurationMs, Strict, dotted_path

# Airflow's own pattern for pool names and Celery's for queues: no spaces, nothing odd.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
#: Airflow's default owner of eos's DAGs, unless ``airflow.owner`` says another.
DEFAULT_OWNER = "eos"
#: The retries of begin, precommit and abort unless ``airflow.retries`` says otherwise.
DEFAULT_RETRIES = 3

Permissions = dict[str, list[str]] | list[str]


class DagConfig(Strict):
    """The pipeline's DAG settings, applied to its epochs' DAG and every task of it (and to its
    rewind DAG: owner, tags, access control)."""

    dag: bool = Field(
        default=True,
        description="Whether the pipeline gets a DAG of its own (eos_<name>); false when its "
                    "epochs run only inside other DAGs (epoch_task_group). Its rewind DAG "
                    "stays.")
    owner: str = Field(default=DEFAULT_OWNER, min_length=1,
                       description="The owner Airflow shows on the DAG and its tasks.")
    tags: list[str] = Field(
        default_factory=list,
        description="Tags added to the DAG's own (eos and the pipeline's name).")
    pool: str | None = Field(
        default=None, description="The Airflow pool every task of the DAG runs in (default: "
                                  "default_pool).")
    queue: str | None = Field(
        default=None, description="The executor queue of every task (Celery, Kubernetes: which "
                                  "workers take them).")
    retries: int | None = Field(
        default=None, ge=0, le=100,
        description=f"Retries of begin, precommit and abort (default {DEFAULT_RETRIES}; "
                    "precommit 2). Commit keeps retrying until it succeeds: a pre-committed "
                    "epoch must commit.")
    retry_delay: DurationMs | None = Field(
        default=None, ge=1000,
        description="The first retry's delay of those tasks (it doubles on each retry).")
    on_failure_callback: str | None = Field(
        default=None,
        description="The dotted path of a function Airflow calls with the context of a task "
                    "that failed, e.g. my_team.alerts.page_on_call.")
    access_control: dict[str, Permissions] = Field(
        default_factory=dict,
        description="Airflow's DAG-level access control: role -> permissions, e.g. "
                    "{Op: [can_read, can_edit]} (honoured by the FAB auth manager).")
    doc_md: str | None = Field(
        default=None,
        description="Markdown shown on the DAG's page above eos's own operating notes.")

    @field_validator("on_failure_callback")
    @classmethod
    def _dotted(cls, value: str | None) -> str | None:
        return dotted_path(value, "a callback", "package.module.function")

    @field_validator("pool", "queue")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(f"{value!r}: letters, digits, '_', '.' and '-' only")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not tag.strip() or len(tag) > 100:
                raise ValueError(f"a tag is 1 to 100 characters, got {tag!r}")
        return value
