"""spark-submit entry point for task ``precommit``: stage epoch N. All logic is in eos.protocol.

Exit codes follow ``eos.errors``: 0 staged (or nothing to do), ``EXIT_PERMANENT`` for an error a
retry cannot fix (the DAG's operator then fails the task without retries), ``EXIT_TRANSIENT`` or
Spark's own failure code otherwise (retried).
"""

from __future__ import annotations

import argparse
import os
import sys

from eos.config import load_pipeline
from eos.errors import (
    EXIT_PERMANENT,
    EXIT_TRANSIENT,
    EosError,
    PermanentError,
    describe_failure,
    exit_code,
    wrapped_error_class,
)
from eos.phaselog import configure
from eos.protocol import precommit

# pyspark marks a process that opened a Spark Connect session in its environment; inherited by
# this app (e.g. from an Airflow worker that ran a Connect task), the mark would make
# getOrCreate() ask for a Connect URL instead of starting Spark here.
for _mark in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"):
    os.environ.pop(_mark, None)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="precommit.py")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--pipeline")
    group.add_argument("--config")
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--plan-hash")
    args = parser.parse_args(argv)
    configure()
    try:
        config = load_pipeline(args.pipeline, args.config)
        precommit(config, args.epoch, expected_hash=args.plan_hash)
    except EosError as error:
        print(f"eos: error: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return exit_code(error)
    except Exception as error:  # a Spark job failure wraps the executor's error in Java's
        print(f"eos: error: {describe_failure(error)}", file=sys.stderr, flush=True)
        wrapped = wrapped_error_class(error)
        if wrapped is not None:  # an EosError raised on an executor: keep its retry policy
            return EXIT_PERMANENT if issubclass(wrapped, PermanentError) else EXIT_TRANSIENT
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
