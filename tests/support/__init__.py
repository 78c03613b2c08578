"""What the test modules share: pipelines (``pipelines``), the in-process source, stager and
sinks of the unit tier (``memory``), the harness for epochs, sinks and the ``eos`` command
(``harness``), and the fixtures of the embedded services (``store``, ``cluster``, loaded as
plugins by tests/conftest.py). Test modules import from here, never from each other."""

import pkgutil

import pytest

# Some of these modules hold asserts (a failure-matrix row, an end-to-end check): they report
# like a test's own, so every module of the package is rewritten as pytest rewrites tests.
pytest.register_assert_rewrite(*(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)))
