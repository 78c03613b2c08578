"""The error vocabulary (``eos.core.errors``): every error states its retry policy, and an error
crossing a process comes back as the same class."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from eos.core import errors
from eos.core.errors import (
    DataLoss,
    EosError,
    KafkaUnavailable,
    PermanentError,
    TransientError,
    UnknownPermanent,
    UnknownTransient,
    carried,
    describe_failure,
    envelope,
    exit_code,
    from_payload,
    is_permanent,
)

LIBRARY = Path(errors.__file__).resolve().parents[1]
BASES = (EosError, TransientError, PermanentError)


def _error_classes() -> list[type[EosError]]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, EosError) and c not in BASES]


def test_every_error_class_is_transient_or_permanent() -> None:
    classes = _error_classes()
    assert len(classes) > 10
    for cls in classes:
        assert issubclass(cls, TransientError) != issubclass(cls, PermanentError), cls
        assert cls("x").retryable is issubclass(cls, TransientError)


@pytest.mark.parametrize("base", BASES)
def test_a_base_class_cannot_be_raised(base: type[EosError]) -> None:
    with pytest.raises(TypeError, match="specific error class"):
        base("which policy?")


def test_no_raise_site_names_a_base_class() -> None:
    """Every ``raise`` in the library names a specific class (checked in the source, so a raise
    on a path no test reaches is caught too)."""
    offenders = []
    for path in LIBRARY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", None))
                if name in {b.__name__ for b in BASES}:
                    offenders.append(f"{path.relative_to(LIBRARY)}:{node.lineno}")
    assert not offenders, offenders


def test_error_classes_live_in_the_one_exception_module() -> None:
    """Like delta-rs' one exceptions module: no EosError subclass is defined elsewhere."""
    elsewhere = []
    for path in LIBRARY.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Unavailable"))
                    and getattr(b, "id", getattr(b, "attr", "")) in errors.__dict__
                    for b in node.bases):
                elsewhere.append(f"{path.relative_to(LIBRARY)}:{node.name}")
    assert not elsewhere, elsewhere


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_an_error_travels_as_data_and_comes_back_as_its_class(cls: type[EosError]) -> None:
    error = cls("partition 3: offsets [10, 20) are gone\nsecond line: 'quoted' \"too\"")
    back = from_payload(error.to_payload())
    assert type(back) is cls and back.message == error.message
    assert is_permanent(back) is is_permanent(error)


def test_an_error_leaves_a_spark_worker_inside_the_exception_text() -> None:
    """What the driver sees: the worker's traceback, Java's frames around it; the envelope line
    carries the class and message, whatever else the text holds."""
    error = DataLoss("partition 0: offsets [0, 5) are no longer in Kafka")
    text = ("org.apache.spark.SparkException: Job aborted due to stage failure:\n"
            "Traceback (most recent call last):\n  File \"reader.py\", line 9, in read\n"
            f"RuntimeError: {envelope(error)}\n\tat org.apache.spark.api.python...\n")
    back = carried(text)
    assert isinstance(back, DataLoss) and back.message == error.message
    assert describe_failure(RuntimeError(text)) == f"DataLoss: {error.message}"
    assert carried("RuntimeError: eos.core.errors.DataLoss: not an envelope") is None


def test_an_unknown_class_keeps_the_retry_policy_it_was_sent_with() -> None:
    assert isinstance(from_payload({"type": "FromANewerVersion", "message": "m",
                                    "retryable": False}), UnknownPermanent)
    assert isinstance(from_payload({"type": "EosError", "message": "m"}), UnknownTransient)


def test_exit_codes_follow_the_retry_policy() -> None:
    assert exit_code(DataLoss("x")) == errors.EXIT_PERMANENT
    assert exit_code(KafkaUnavailable("x")) == errors.EXIT_TRANSIENT
    assert exit_code(ValueError("not ours")) == errors.EXIT_TRANSIENT
