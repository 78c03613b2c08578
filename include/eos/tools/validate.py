"""``eos validate``, ``eos schema`` and ``eos reference``: a pipeline file checked as a DAG run
loads it, the JSON Schema editors check it with, and the generated reference pages. Thin: the
checks are the config loader's (``eos.core.config.load_config``: every section, the checks
across them, each sink's options through its entry point), which needs no Spark and no broker."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eos.core.config import list_pipelines, load_config, pipeline_path
from eos.core.config.paths import pipelines_dir
from eos.core.errors import ConfigError


@dataclass(frozen=True)
class Checked:
    """One file's verdict: the pipeline it holds, or the loader's message naming the key."""

    path: Path
    pipeline: str | None = None
    error: str | None = None

    @property
    def line(self) -> str:
        if self.error is None:
            return f"OK    {self.path} (pipeline {self.pipeline})"
        return f"ERROR {self.error}"


def check_file(path: Path) -> Checked:
    """Load ``path`` as a DAG run would; the error, if any, as the loader words it."""
    try:
        config = load_config(path)
    except ConfigError as error:
        return Checked(path, error=str(error))
    except Exception as error:  # a sink type's own code failed: still one line, then the next
        return Checked(path, error=f"pipeline config {path} could not be checked: "
                                   f"{type(error).__name__}: {error}")
    return Checked(path, pipeline=config.name)


def same_names_refused(results: list[Checked]) -> list[Checked]:
    """Two files declaring one pipeline name are both errors: a deployment would build one
    DAG for the two, and they would share its tables, offsets and epochs."""
    paths: dict[str, list[Path]] = {}
    for result in results:
        if result.pipeline is not None:
            paths.setdefault(result.pipeline, []).append(result.path)
    return [
        Checked(r.path, error=f"pipeline config {r.path}: two files declare pipeline "
                              f"'{r.pipeline}': " + ", ".join(map(str, paths[r.pipeline]))
                              + "; give each pipeline its own name")
        if r.pipeline is not None and len(paths[r.pipeline]) > 1 else r
        for r in results]


def files_to_check(targets: list[str]) -> list[Path]:
    """Each target as files: a file, a directory's ``*.yaml``, or a pipeline's name in the
    pipelines directory; none: every pipeline there. A target that is none of these is kept,
    so its check says it cannot be read."""
    if not targets:
        return list_pipelines()
    files: list[Path] = []
    for target in targets:
        path = Path(target)
        if path.is_dir():
            files += sorted(path.glob("*.yaml"))
        elif path.exists() or "/" in target or target.endswith((".yaml", ".yml")):
            files.append(path)
        else:
            files.append(pipeline_path(target))
    return files


def cmd_validate(args: argparse.Namespace) -> int:
    files = files_to_check(args.targets)
    if not files:
        where = ", ".join(args.targets) if args.targets else str(pipelines_dir())
        print(f"ERROR no pipeline files in {where}")
        return 1
    results = same_names_refused([check_file(path) for path in files])
    for result in results:
        print(result.line)
    return 1 if any(r.error for r in results) else 0


def cmd_schema(args: argparse.Namespace) -> int:
    from eos.core.config.schema import pipeline_schema

    print(json.dumps(pipeline_schema(), indent=2))
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    from eos.tools.docs_reference import write

    for path in write(args.build_parser(), Path(args.root)):
        print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction,
             build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """The three commands, on the ``eos`` parser (``build_parser`` makes it anew: the command
    reference documents every command)."""
    p = sub.add_parser("validate", help="check pipeline files as a DAG run loads them (no Spark, "
                       "no broker): one line per file, exit 1 if any is invalid")
    p.add_argument("targets", nargs="*", metavar="PATH|NAME",
                   help="a pipeline file, a directory of them, or a pipeline's name; default: "
                        "every pipeline in the pipelines directory")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("schema", help="print the JSON Schema of a pipeline file (for editors)")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("reference", help="write the configuration and command reference and "
                       "the JSON Schema into the user guide (docs/reference/)")
    p.add_argument("--root", default=".", help="the project whose docs/ to write (default: "
                   "the current directory)")
    p.set_defaults(func=cmd_reference, build_parser=build_parser)
