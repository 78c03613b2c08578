"""Where records come from: the Kafka topics an epoch reads (one, a list or a pattern), where a
new pipeline starts, and how its consumer reads them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from eos.core.config.client import ClientSettings
from eos.core.config.positions import StartPosition
from eos.core.config.values import DurationMs, Strict

START_PATTERN = (r"^(earliest|latest|timestamp:(\d+|\d{4}-\d{2}-\d{2}T\S+)"
                 r"|offsets:\d+=\d+(,\d+=\d+)*)$")


class KafkaConfig(Strict):
    """The topics an epoch reads and how its consumer reads them (``client``: librdkafka
    settings). Exactly one of ``topic``, ``topics`` and ``pattern`` names them."""

    topic: str | None = Field(
        default=None, min_length=1,
        description="The source topic (one of `topic`, `topics`, `pattern`).")
    topics: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, min_length=1,
        description="Several source topics, read as one input (one of `topic`, `topics`, "
                    "`pattern`). A topic added to the list later starts at its log start.")
    pattern: str | None = Field(
        default=None, json_schema_extra={"pattern": "^\\^"},
        description="A regular expression starting with `^` (librdkafka style): every topic "
                    "whose name matches, internal topics (`__...`) left out, resolved from the "
                    "broker's metadata when each epoch is planned (one of `topic`, `topics`, "
                    "`pattern`). A topic matched for the first time starts at its log start.")
    start: str = Field(
        default="earliest",
        json_schema_extra={"pattern": START_PATTERN},
        description="Where a new pipeline starts reading: `earliest` (the log start), `latest` "
                    "(the end), `timestamp:<t>` (the first record whose Kafka timestamp is at or "
                    "after t: milliseconds since 1970 or an ISO-8601 time with its zone, e.g. "
                    "`timestamp:2026-11-01T00:00:00Z`) or `offsets:<p>=<o>,...` (one offset for "
                    "every partition). Decided once, when the first epoch is planned. A "
                    "partition that appears later starts at its log start whatever this says.")
    client: ClientSettings = Field(
        default_factory=dict,
        description="Extra librdkafka settings for every client of the source. `${VAR}` in a "
                    "value is read from the environment (where the client runs, Spark "
                    "executors included); secrets belong there, not in this file.")
    read_timeout: DurationMs = Field(
        default=60_000, description="A Spark split that makes no progress this long fails.")
    @field_validator("start")
    @classmethod
    def _known_position(cls, value: str) -> str:
        return StartPosition.parse(value).describe()

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        return None if value is None else topic_pattern(value).pattern

    @field_validator("topics")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"kafka.topics names a topic twice: {value}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> KafkaConfig:
        given = [k for k in ("topic", "topics", "pattern") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of kafka.topic, kafka.topics and kafka.pattern"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self

    @property
    def named_topics(self) -> list[str] | None:
        """The topics the config names (``topic`` or ``topics``); None with ``pattern``."""
        return [self.topic] if self.topic is not None else self.topics

    @property
    def sole_topic(self) -> str:
        """The one topic a tool that writes to the source produces to (``eos produce``, the
        demo); ``ConfigError`` for a pipeline of several topics or a pattern."""
        if self.topic is not None:
            return self.topic
        if self.topics is not None and len(self.topics) == 1:
            return self.topics[0]
        from eos.core.errors import ConfigError

        raise ConfigError(f"this needs a pipeline of one topic, and it reads {self.describe()}")

    def describe(self) -> str:
        """``topic 'a'``, ``topics 'a', 'b'`` or ``topics matching '^a'``."""
        if self.pattern is not None:
            return f"topics matching '{self.pattern}'"
        names = self.named_topics or []
        return (f"topic '{names[0]}'" if len(names) == 1
                else "topics " + ", ".join(f"'{t}'" for t in names))

    @property
    def start_position(self) -> StartPosition:
        """``start`` as the planner uses it."""
        return StartPosition.parse(self.start)

    split_records: int = Field(
        default=250_000, gt=0,
        description="The most offsets one Spark input split reads: an epoch's ranges are "
                    "packed into max(spark.shuffle_partitions, records / split_records) splits.")


def topic_pattern(text: str) -> re.Pattern[str]:
    """``kafka.pattern`` compiled; a ``ValueError`` naming it when it is not a regular expression
    starting with ``^``."""
    if not text.startswith("^"):
        raise ValueError(f"kafka.pattern '{text}' must start with '^' (a librdkafka-style "
                         "topic regex)")
    try:
        return re.compile(text)
    except re.error as error:
        raise ValueError(f"kafka.pattern '{text}' is not a regular expression: {error}") from None
