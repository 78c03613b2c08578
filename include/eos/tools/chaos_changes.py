"""Changes to a running pipeline's config that ``eos chaos --changes`` makes between epochs:
the routine edits people make (docs/changing.md), mixed with the crashes, so that a run proves
they lose and double nothing too.

Each change rewrites the pipeline's file (a copy of it, in a directory of the run's own: the
pipelines directory is never touched) and loads it again, as the next DAG run would:

- ``add sink``: a Delta sink joins the output of windows (or rows), at the next epoch;
- ``remove sink``: a sink a change added leaves again (its table keeps what it holds);
- ``edit filter``: the filter alternates between the pipeline's own and one that also drops
  every record whose offset is 3 modulo 7, so epochs differ in what they count and the audit
  must recompute each with its own;
- ``add topic``: a new topic joins the source (``topic: a`` becomes ``topics: [a, b]``), read
  from its log start at the next epoch; the run then produces to every source topic. Only a
  pipeline reading named topics (not a ``pattern``) gets one, at most ``MAX_TOPICS`` in all.

The sinks the pipeline declares stay: the audit compares each of them with every epoch.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from eos.core.config import PipelineConfig, load_config

CHANGES = ("add sink", "remove sink", "edit filter", "add topic")
_STRICTER = "kafka_offset % 7 <> 3"
MAX_TOPICS = 3


@dataclass
class ConfigChanges:
    """The run's copy of the pipeline file and what was changed in it so far."""

    path: Path
    original_filter: str | None
    added: list[str] = field(default_factory=list)  # table names of the sinks a change added
    made: list[str] = field(default_factory=list)  # "epoch N: what", in order
    _next_sink: int = 0

    @classmethod
    def copy_of(cls, config: PipelineConfig) -> ConfigChanges:
        """A copy of ``config``'s file in a directory of its own, under the same name: the
        same pipeline (its tables, offsets and epochs), a file the run may rewrite."""
        source = Path(str(config.source_path))
        path = Path(tempfile.mkdtemp(prefix="eos-chaos-config-")) / source.name
        shutil.copyfile(source, path)
        return cls(path, config.event.filter)

    def config(self) -> PipelineConfig:
        return load_config(self.path)

    def change(self, rng: random.Random, epoch: int) -> PipelineConfig:
        """One change drawn by ``rng``, made before ``epoch``; the config as it now loads."""
        data = yaml.safe_load(self.path.read_text())
        what = rng.choice([c for c in CHANGES if self._possible(c, data)])
        output = "rows" if data.get("window") is None else "windows"
        sinks = data.setdefault("sinks", {})
        listed: list[Any] = sinks.setdefault(output, [{"delta": "target"}])
        if what == "add topic":
            kafka = data["kafka"]
            topics = kafka.pop("topics", None) or [kafka.pop("topic")]
            kafka["topics"] = [*topics, f"{topics[0]}-chaos-{len(topics)}"]
        elif what == "add sink":
            name = f"chaos_added_{self._next_sink}"
            self._next_sink += 1
            listed.append({"delta": name})
            self.added.append(name)
        elif what == "remove sink":
            name = self.added.pop(rng.randrange(len(self.added)))
            sinks[output] = [s for s in listed if s != {"delta": name}]
        else:
            event = data.setdefault("event", {})
            stricter = (f"({self.original_filter}) AND {_STRICTER}" if self.original_filter
                        else _STRICTER)
            if event.get("filter") == stricter:
                event.pop("filter", None)
                if self.original_filter is not None:
                    event["filter"] = self.original_filter
            else:
                event["filter"] = stricter
        self.path.write_text(yaml.safe_dump(data, sort_keys=False))
        self.made.append(f"epoch {epoch}: {what}")
        return self.config()

    def _possible(self, what: str, data: dict[str, Any]) -> bool:
        if what == "remove sink":
            return bool(self.added)
        if what == "add topic":
            kafka = data.get("kafka") or {}
            return "pattern" not in kafka and len(kafka.get("topics") or [1]) < MAX_TOPICS
        return True

    def cleanup(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)
