"""A kit for sink authors: test a sink against the contract (``eos.sink``) without a broker,
Spark or Airflow (docs/sinks.md, "Test your sink with eos.testing").

- ``SinkContract``: the contract as pytest tests; subclass it and say which sink to build
  (``eos.testing.contract``; needs pytest, imported when first asked for).
- ``contract_pipeline``, ``epoch_rows``, ``schema_of``, ``rows_identity``,
  ``with_column_type``: a pipeline around one sink and deterministic rows of its output
  (``eos.testing.rows``).
- ``MemorySink``, ``RewindableMemorySink``, ``KeptMemorySink`` (``{memory: NAME}``, ...): sinks
  in this process's memory, for the outputs a test does not point at the sink under test, and
  a reference implementation of the contract (``eos.testing.memory``).

Nothing of the library imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eos.testing.memory import (
    MEMORY_SINKS,
    REWINDABLE_SINKS,
    STORES,
    KeptMemorySink,
    MemorySink,
    RewindableMemorySink,
    Store,
    at_once,
    store,
)
from eos.testing.rows import (
    contract_pipeline,
    epoch_rows,
    rows_identity,
    schema_of,
    with_column_type,
)

if TYPE_CHECKING:
    from eos.testing.contract import SinkContract

__all__ = ["MEMORY_SINKS", "REWINDABLE_SINKS", "STORES", "KeptMemorySink", "MemorySink",
           "RewindableMemorySink", "SinkContract", "Store", "at_once", "contract_pipeline",
           "epoch_rows", "rows_identity", "schema_of", "store", "with_column_type"]


def __getattr__(name: str) -> Any:
    if name == "SinkContract":  # pytest is needed for it only
        from eos.testing.contract import SinkContract

        return SinkContract
    raise AttributeError(f"module 'eos.testing' has no attribute {name!r}")
