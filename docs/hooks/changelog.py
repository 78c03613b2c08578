"""MkDocs hook: the guide's changelog page is the project's CHANGELOG.md (at the repository's
root, outside docs/), and the site's name carries the version the package reports."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"


def on_config(config: Any) -> Any:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version = project.get("version")
    if not version:  # a version the build computes: the installed package's
        try:
            version = metadata.version(project["name"])
        except metadata.PackageNotFoundError:
            version = None
    if version:
        config["site_name"] = f"eos {version}"
    return config


def on_files(files: Files, config: Any) -> Files:
    if not CHANGELOG.exists():
        raise PluginError(f"{CHANGELOG} is missing: the guide's changelog page is that file")
    files.append(File.generated(config, "changelog.md", abs_src_path=str(CHANGELOG)))
    return files
