"""spark-submit entry point for task ``precommit``: stage epoch N. All logic is in
eos.core.protocol. spark-submit runs this file of the installed package (``APP`` in
``eos.compute.spark``), so a deployment ships no Spark app of its own.

Exit codes follow ``eos.core.errors``: 0 staged (or nothing to do), ``EXIT_PERMANENT`` for an
error a retry cannot fix (the DAG's operator then fails the task without retries),
``EXIT_TRANSIENT`` or Spark's own failure code otherwise (retried). With ``--result-file`` the
result, or the error as data, is also written there for a caller that reads it
(``eos.compute.spark.submit_precommit``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Run as a file, this module's directory would come first on sys.path and its siblings
# (``spark``, ``session``, ``connect``...) would shadow top-level modules of those names.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _HERE]

from eos.compute.precommit.stager import SparkStager  # noqa: E402
from eos.core.config import load_pipeline  # noqa: E402
from eos.core.errors import (  # noqa: E402
    EosError,
    SparkJobFailed,
    carried,
    describe_failure,
    exit_code,
)
from eos.core.phaselog import configure  # noqa: E402
from eos.core.protocol import precommit  # noqa: E402

# pyspark marks a process that opened a Spark Connect session in its environment; inherited by
# this app (e.g. from an Airflow worker that ran a Connect task), the mark would make
# getOrCreate() ask for a Connect URL instead of starting Spark here.
for _mark in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"):
    os.environ.pop(_mark, None)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="eos.compute.app")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--pipeline")
    group.add_argument("--config")
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--plan-hash")
    parser.add_argument("--result-file", type=Path,
                        help="write the result or the error here as JSON (for the caller)")
    args = parser.parse_args(argv)
    configure()
    try:
        config = load_pipeline(args.pipeline, args.config)
        result = precommit(config, args.epoch, SparkStager(), expected_hash=args.plan_hash)
    except Exception as error:
        # A Spark job failure carries an executor's library error in its text: raise it as
        # its own class, so its retry policy reaches the caller.
        typed = error if isinstance(error, EosError) else carried(str(error))
        if typed is None:
            typed = SparkJobFailed(f"precommit of epoch {args.epoch} failed: "
                                   f"{describe_failure(error)}")
        print(f"eos: error: {type(typed).__name__}: {typed}", file=sys.stderr, flush=True)
        _write(args.result_file, {"error": typed.to_payload()})
        return exit_code(typed)
    _write(args.result_file, {"result": result.to_payload()})
    return 0


def _write(path: Path | None, payload: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(payload))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
