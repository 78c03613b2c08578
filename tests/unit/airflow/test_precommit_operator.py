"""The spark-submit precommit task's retry policy (``eos.airflow.precommit_operator``), through
the provider's own ``execute`` and a stand-in ``spark-submit`` that behaves as the app does: it
prints its error line, writes its result file (``--result-file``) and exits with the error's
code (``eos.core.errors.exit_code``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

FAKE_SUBMIT = """#!/bin/sh
while [ "$#" -gt 0 ]; do
  if [ "$1" = "--result-file" ]; then result="$2"; fi
  shift
done
printf '%s\\n' "$EOS_FAKE_LINE"
if [ -n "$EOS_FAKE_RESULT" ]; then printf '%s' "$EOS_FAKE_RESULT" > "$result"; fi
exit "$EOS_FAKE_EXIT"
"""


def run_precommit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str,
                  outcome: dict | None, code: int) -> str | None:
    from eos.airflow.precommit_operator import PrecommitOperator

    binary = tmp_path / "spark-submit"
    binary.write_text(FAKE_SUBMIT)
    binary.chmod(0o755)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                       json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("EOS_FAKE_LINE", line)
    monkeypatch.setenv("EOS_FAKE_RESULT", json.dumps(outcome) if outcome else "")
    monkeypatch.setenv("EOS_FAKE_EXIT", str(code))
    operator = PrecommitOperator(task_id="precommit", application="app.py",
                                 application_args=["--epoch", "0"], spark_binary=str(binary))
    result = operator.execute({})
    assert operator.application_args == ["--epoch", "0"]  # the result file is per try
    return result


def test_a_permanent_error_fails_at_once_with_the_apps_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from eos.core.errors import EXIT_PERMANENT, DataLoss

    error = DataLoss("offsets 0..10 were deleted\nsecond line")
    with pytest.raises(AirflowFailException) as failed:
        run_precommit(tmp_path, monkeypatch, "eos: error: DataLoss: offsets 0..10 were deleted",
                      {"error": error.to_payload()}, EXIT_PERMANENT)
    assert str(failed.value) == "eos: error: DataLoss: offsets 0..10 were deleted"


@pytest.mark.parametrize("outcome", [None, "transient"])
def test_a_transient_error_or_no_result_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str | None) -> None:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from eos.core.errors import EXIT_TRANSIENT, KafkaUnavailable

    payload = {"error": KafkaUnavailable("no answer").to_payload()} if outcome else None
    with pytest.raises(AirflowException) as failed:
        run_precommit(tmp_path, monkeypatch, "eos: error: KafkaUnavailable: no answer",
                      payload, EXIT_TRANSIENT)
    assert not isinstance(failed.value, AirflowFailException)
    assert "Error code is: " in str(failed.value)


def test_a_staged_epoch_returns_its_phase_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_precommit(tmp_path, monkeypatch, "staged", None, 0) is None  # no result file
