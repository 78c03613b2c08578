"""Reading a pipeline config: from YAML text or a parsed mapping to a validated
``PipelineConfig``, or one ``ConfigError`` whose message names every bad field and never
quotes the file's text (an inline secret would reach the logs and the UI)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from eos.core.config.paths import list_pipelines, pipeline_path, pipelines_dir
from eos.core.config.pipeline import PipelineConfig
from eos.core.errors import ConfigError


def _describe(error: ValidationError, source: str) -> str:
    """Every problem pydantic found, each with its field's dotted path, in one line."""
    problems = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        field = ".".join(str(p) for p in item["loc"])
        # A check across sections (a field used but not declared) names the field itself.
        problems.append(f"field '{field}': {message}" if field else message)
    return f"invalid pipeline config {source}: " + "; ".join(problems)


def parse_config(data: Any, source: str = "<memory>") -> PipelineConfig:
    """A parsed mapping to a config; ``source`` names it in messages and in ``source_path``."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid pipeline config {source}: expected a mapping at top level")
    try:
        return PipelineConfig.model_validate({**data, "source_path": source})
    except ValidationError as error:
        raise ConfigError(_describe(error, source)) from None


def load_config(path: str | Path) -> PipelineConfig:
    """A YAML file to a config: unreadable files and YAML errors fail like invalid fields."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read pipeline config {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"pipeline config {path} is not UTF-8 text (byte {error.start})"
                          ) from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as error:
        raise ConfigError(f"pipeline config {path} is not valid YAML: "
                          f"{_yaml_problem(error)}") from None
    return parse_config(data, str(path.resolve()))


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key. YAML 1.2 says keys are
    unique; PyYAML keeps the last one silently, so a second ``filter:`` written lower in a file
    would replace the first without a word. The error carries the repeated key's line and
    column like any other YAML error."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # a merge (<<) is overridden by the keys beside it: not a repeat
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)):
                    continue
                if key in seen:
                    first = seen[key].start_mark
                    # The key unquoted: the message is stripped of quoted text (a secret).
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"key {key} appears twice in one mapping (first at line "
                        f"{first.line + 1}, column {first.column + 1}); YAML keys are "
                        "unique, and the last one would silently win: remove one",
                        key_node.start_mark)
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _unquoted(text: str) -> str:
    """A YAML problem with every quoted piece of the document left out: PyYAML quotes tags,
    aliases and anchors as written, which may be a secret. Its own token names (``'<block
    end>'``) and single characters (``':'``, ``'\\t'``) stay: they say what is wrong."""
    def keep(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        return match.group(0) if len(inner) <= 2 or inner.startswith("<") else "'…'"

    return _QUOTED.sub(keep, text)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """Where a YAML error is and what it is, never the text around it: PyYAML's message quotes
    the offending line, and an inline secret on that line would reach the logs and the UI."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
    what = _unquoted(str(problem)) if problem else type(error).__name__
    return f"{where}: {what}"


def load_pipeline(name: str | None = None, path: str | Path | None = None) -> PipelineConfig:
    """Resolve ``--pipeline NAME`` or ``--config PATH`` (exactly one) to a validated config."""
    if path is not None and name is None:
        return load_config(path)
    if name is None or path is not None:
        raise ConfigError("name a pipeline with --pipeline NAME or a file with --config PATH")
    candidate = pipeline_path(name)
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in list_pipelines())) or "none"
        raise ConfigError(f"no pipeline named '{name}' in {pipelines_dir()} (known: {known})")
    return load_config(candidate)
