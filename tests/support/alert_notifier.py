"""A notifier for the stall-alert tests, importable by dotted path in any process (the tests'
own, and the triggerer of a real ``airflow standalone``): importing it changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier

PATH = "support.alert_notifier.FileNotifier"


class FileNotifier(BaseNotifier):
    """An Airflow notifier (async, as deadline callbacks in the triggerer want) that writes the
    rendered text and what the context said to ``path``: what a Slack or e-mail notifier would
    send, where a test can read it."""

    template_fields = ("text",)

    def __init__(self, path: str, text: str) -> None:
        super().__init__()
        self.path, self.text = path, text

    async def async_notify(self, context: Any) -> None:
        Path(self.path).write_text(json.dumps({"text": self.text, "stall": context["eos_stall"],
                                               "run_id": context["dag_run"]["dag_run_id"]}))


def task_failed(context: Any) -> None:
    """An ``airflow.on_failure_callback`` for the DAG-settings tests (never called there)."""

