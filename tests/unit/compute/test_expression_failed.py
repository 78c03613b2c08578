"""A value that breaks a select, filter or derived field (Spark's ANSI errors) is a permanent
error naming the epoch and the way out; any other Spark failure stays what it was."""

from __future__ import annotations

from dataclasses import dataclass

from eos.compute.precommit.stager import expression_failed
from eos.core.errors import ExpressionFailed, is_permanent


@dataclass
class _Plan:
    epoch: int = 7

    def describe_ranges(self) -> str:
        return "p0:[0,10)"


class _Condition(Exception):
    """What pyspark raises: its error class through ``getCondition``."""

    def __init__(self, message: str, condition: str) -> None:
        super().__init__(message)
        self.condition = condition

    def getCondition(self) -> str:
        return self.condition


def test_an_overflow_in_a_select_is_permanent_and_says_what_to_do() -> None:
    condition = "NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION"
    error = _Condition(f"[{condition}] 1E+31 cannot be represented as Decimal(38, 7).\n"
                       "== DataFrame ==", condition)
    failed = expression_failed(error, _Plan())
    assert isinstance(failed, ExpressionFailed) and is_permanent(failed)
    assert "epoch 7" in failed.message and "p0:[0,10)" in failed.message
    assert "cannot be represented as Decimal(38, 7)" in failed.message
    assert "TRY_CAST" in failed.message and "== DataFrame ==" not in failed.message


def test_the_condition_is_read_from_the_message_when_the_error_has_none() -> None:
    text = "[CAST_INVALID_INPUT] The value '/help/71' of the type \"STRING\" cannot be cast"
    assert isinstance(expression_failed(RuntimeError(text), _Plan()), ExpressionFailed)


def test_other_spark_failures_are_left_alone() -> None:
    assert expression_failed(_Condition("[INVALID_HANDLE.SESSION_CLOSED] gone",
                                        "INVALID_HANDLE.SESSION_CLOSED"), _Plan()) is None
    assert expression_failed(RuntimeError("Connection reset by peer"), _Plan()) is None
