"""What the test modules share: pipelines (``pipelines``), the in-process source, stager and
sinks of the unit tier (``memory``), the harness for epochs, sinks and the ``eos`` command
(``harness``), and the fixtures of the embedded services (``store``, ``cluster``, loaded as
plugins by tests/conftest.py). Test modules import from here, never from each other."""

import pytest

# The failure matrix's rows are tests run by two modules: their asserts report like any test's.
pytest.register_assert_rewrite("support.failure_matrix")
