"""The JSON-lines sink of docs/sinks.md, checked by the contract kit (docs/sinks.md shows this
file whole, in "Test your sink with eos.testing")."""

from pathlib import Path
from typing import Any

from eos.testing import SinkContract

from support.jsonl_sink import JsonLinesSink  # the sink under test


class TestJsonLinesContract(SinkContract):
    sink_type = JsonLinesSink  # registered while each test runs

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        """The sink's entry in the test pipeline, writing under the test's own directory."""
        return {"jsonl": str(directory / "out")}
