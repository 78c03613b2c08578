"""spark-submit entry point for task ``precommit``: stage epoch N. All logic is in eos.stage."""

from __future__ import annotations

import argparse
import sys

from eos.config import load_pipeline
from eos.errors import EosError, describe_failure
from eos.phaselog import configure
from eos.stage import precommit


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
        print(f"eos: error: {error}", file=sys.stderr, flush=True)
        return 2
    except Exception as error:  # a Spark job failure wraps the executor's error in Java's
        print(f"eos: error: {describe_failure(error)}", file=sys.stderr, flush=True)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
