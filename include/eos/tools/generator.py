"""Deterministic event generator: the demo's input and the tests' ground truth.

Same arguments and seed, same records in the same order: tests recompute the expected windows
from the generated events, so nothing here may depend on the clock or on the broker.

Two event shapes (``GeneratorSpec.shape``):

- ``clicks``: flat ``{"event_id", "key", "ts": epoch ms, "value": number}`` (field names from
  ``key_field/time_field/value_field``); bad records are one of ``BAD_KINDS``.
- ``pageviews``: ``{"event_id", "ts": ISO-8601 with milliseconds ("Z" or an offset such as
  "+05:30", the same instant either way), "page": "/products/7", "user": {"id": "u12",
  "country": "DE"}, "revenue": 2 decimals, often 0, a few negative refunds, "duration_ms": an
  integer, "referrer": a URL, null or absent}``; bad records are one of ``PAGEVIEW_BAD_KINDS``.

Both: record ``i`` arrives (Kafka timestamp) at ``start_ms + i * interval_ms``; its event time
is up to ``disorder_ms`` earlier, or, for a ``late`` record, ``late_delay_ms`` to twice that.
``start_ms`` defaults to ``BASE_TIME_MS``, a fixed instant, so that a spec alone fixes its records
(the tests' ground truth). ``eos produce`` continues a stream instead: a batch starts after the
last record already on the topic (``eos.tools.produce.continue_after``), or where ``--start-at``
says, so a second batch is not all behind the watermark the first one moved.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from eos.core.errors import ConfigError

if TYPE_CHECKING:
    from eos.core.config import EventConfig, PipelineConfig

BASE_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: event time is synthetic, not wall clock
BAD_KINDS = ("malformed_json", "missing_field", "wrong_type", "not_utf8", "not_object")
PAGEVIEW_BAD_KINDS = (
    "malformed_json",       # the JSON text is cut short
    "not_utf8",             # the page is Latin-1 encoded: the value is not UTF-8
    "not_object",           # valid JSON but not an object: an array, a JSON-encoded string, null
    "missing_user",         # no nested "user" object, so no user.id and user.country
    "page_not_string",      # "page" is an object where a string is declared
    "time_without_offset",  # an ISO-8601 time with no "Z" or offset: not an instant
    "revenue_too_precise",  # 3 decimals (1.005) do not fit decimal(12,2): never rounded
    "revenue_nan",          # the literal NaN, which JSON does not allow
    "revenue_string",       # "12.50": a string where a number is declared
)
SHAPES = {"clicks": BAD_KINDS, "pageviews": PAGEVIEW_BAD_KINDS}  # shape -> its bad kinds


@dataclass(frozen=True)
class GeneratorSpec:
    events: int
    keys: int = 100
    interval_ms: int = 10
    disorder_ms: int = 0
    late_fraction: float = 0.0
    late_delay_ms: int = 300_000
    bad_fraction: float = 0.0
    seed: int = 0
    key_field: str = "key"  # clicks only: the JSON names of its three fields
    time_field: str = "ts"
    value_field: str = "value"
    value_whole: bool = False  # clicks only: a whole-number value (a field declared long)
    shape: str = "clicks"  # "clicks" or "pageviews" (SHAPES); keys = distinct keys or pages
    users: int = 500  # pageviews only: distinct user ids
    start_ms: int = BASE_TIME_MS  # arrival time of record 0 (its event time is at most this)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"unknown generator shape {self.shape!r}; known: {', '.join(SHAPES)}")
        if self.keys < 1 or self.users < 1:
            raise ValueError("a generator needs keys >= 1 and users >= 1")


@dataclass(frozen=True)
class GeneratedRecord:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    kind: str  # "good", "late" (deliberately delayed) or one of the shape's bad kinds


def _bad_record(
    rng: random.Random, spec: GeneratorSpec, event: dict[str, Any]
) -> tuple[str, bytes]:
    kind = BAD_KINDS[rng.randrange(len(BAD_KINDS))]
    if kind == "malformed_json":
        return kind, json.dumps(event).encode()[: rng.randrange(1, 20)]
    if kind == "missing_field":
        missing = rng.choice([spec.key_field, spec.time_field, spec.value_field])
        return kind, json.dumps({k: v for k, v in event.items() if k != missing}).encode()
    if kind == "wrong_type":
        broken = dict(event)
        target = rng.choice([spec.time_field, spec.value_field, spec.key_field])
        broken[target] = {spec.time_field: "yesterday", spec.value_field: "lots"}.get(target, [1])
        return kind, json.dumps(broken).encode()
    if kind == "not_utf8":
        return kind, b'{"' + spec.key_field.encode() + b'": "\xff\xfe", "oops": 1}'
    return kind, json.dumps([event]).encode()


def generate(spec: GeneratorSpec) -> Iterator[GeneratedRecord]:
    """The records of ``spec``, in produce order. Pure: a function of the spec alone."""
    if spec.shape == "pageviews":
        return _pageviews(spec)
    return _clicks(spec)


def _clicks(spec: GeneratorSpec) -> Iterator[GeneratedRecord]:
    rng = random.Random(spec.seed)
    for i in range(spec.events):
        arrival = spec.start_ms + i * spec.interval_ms
        key = f"k{rng.randrange(spec.keys):05d}"
        ts = arrival - (rng.randrange(spec.disorder_ms + 1) if spec.disorder_ms else 0)
        kind = "good"
        if spec.late_fraction and rng.random() < spec.late_fraction:
            ts = arrival - spec.late_delay_ms - rng.randrange(spec.late_delay_ms + 1)
            kind = "late"
        value: float | int = round(rng.uniform(0, 1000), 2)
        if spec.value_whole:
            value = int(value * 100)
        event = {
            "event_id": f"{spec.seed}-{i}",
            spec.key_field: key,
            spec.time_field: ts,
            spec.value_field: value,
        }
        if spec.bad_fraction and rng.random() < spec.bad_fraction:
            kind, payload = _bad_record(rng, spec, event)
        else:
            payload = json.dumps(event, separators=(",", ":")).encode()
        yield GeneratedRecord(key.encode(), payload, arrival, kind)


# --------------------------------------------------------------------------- pageviews

# country: (weight, UTC offsets in minutes its users' clients write local times with)
_COUNTRIES = {
    "US": (30, (-480, -300)),
    "DE": (14, (60,)),
    "IN": (12, (330,)),
    "GB": (10, (0,)),
    "BR": (9, (-180,)),
    "FR": (9, (60,)),
    "JP": (8, (540,)),
    "CA": (8, (-300, -480)),
}
_REFERRERS = (
    "https://www.google.com/",
    "https://news.ycombinator.com/",
    "https://t.co/x9Kd2",
    "https://www.bing.com/search?q=eos",
    "android-app://com.slack",
    "",  # an empty referrer header is still a (non-null) string
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LOCAL_TIME_FRACTION = 0.2  # pageviews whose ts carries the client's offset instead of "Z"
REFUND_FRACTION = 0.02  # good pageviews with negative revenue (a filter `revenue >= 0` drops them)
PURCHASE_FRACTION = 0.2  # good pageviews with positive revenue; the rest have revenue 0
REFERRER_FRACTION = 0.4  # pageviews with a referrer; 5% more have "referrer": null


def page_path(index: int) -> str:
    """The page of index ``0 <= index < keys``: distinct indexes give distinct paths."""
    if index == 0:
        return "/"
    section = ("products", "products", "blog", "help")[index % 4]
    return f"/{section}/{index}"


def iso_time(ms: int, offset_minutes: int | None = None) -> str:
    """Epoch ms as ISO-8601 with milliseconds: UTC as ``2026-01-01T00:00:01.234Z``, or with
    ``offset_minutes`` the local time there, ``2026-01-01T05:30:01.234+05:30``: the same instant."""
    instant = _EPOCH + timedelta(milliseconds=ms)
    if offset_minutes is None:
        return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"
    local = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    return local.isoformat(timespec="milliseconds")


def _naive_time(ms: int) -> str:
    """UTC wall-clock time with no offset: ambiguous, so not an event time."""
    return iso_time(ms)[:-1]


def _user_table(spec: GeneratorSpec) -> list[tuple[str, int]]:
    """Each user's (country, offset): a user lives in one place. Its own random stream, so the
    table does not depend on how many events are generated."""
    rng = random.Random(f"eos-users-{spec.seed}")
    names = list(_COUNTRIES)
    weights = [_COUNTRIES[c][0] for c in names]
    table = []
    for _ in range(spec.users):
        country = rng.choices(names, weights)[0]
        table.append((country, rng.choice(_COUNTRIES[country][1])))
    return table


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _pageviews(spec: GeneratorSpec) -> Iterator[GeneratedRecord]:
    rng = random.Random(spec.seed)
    users = _user_table(spec)
    for i in range(spec.events):
        arrival = spec.start_ms + i * spec.interval_ms
        page = page_path(int(spec.keys * rng.random() ** 2))  # a few pages get most views
        user = rng.randrange(spec.users)
        country, offset = users[user]
        ts = arrival - (rng.randrange(spec.disorder_ms + 1) if spec.disorder_ms else 0)
        kind = "good"
        if spec.late_fraction and rng.random() < spec.late_fraction:
            ts = arrival - spec.late_delay_ms - rng.randrange(spec.late_delay_ms + 1)
            kind = "late"
        draw = rng.random()
        cents = rng.randrange(100, 50_000)
        revenue: int | float = 0  # most views buy nothing: the JSON integer 0
        if draw < REFUND_FRACTION:
            revenue = -cents / 100
        elif draw < REFUND_FRACTION + PURCHASE_FRACTION:
            revenue = cents / 100  # shortest repr of cents/100: at most 2 decimals
        local = rng.random() < LOCAL_TIME_FRACTION
        event: dict[str, Any] = {
            "event_id": f"{spec.seed}-{i}",
            "ts": iso_time(ts, offset if local else None),
            "page": page,
            "user": {"id": f"u{user}", "country": country},
            "revenue": revenue,
            "duration_ms": int(rng.expovariate(1 / 30_000)),  # time on the page
        }
        draw = rng.random()
        if draw < REFERRER_FRACTION:
            event["referrer"] = rng.choice(_REFERRERS)
        elif draw < REFERRER_FRACTION + 0.05:
            event["referrer"] = None
        if spec.bad_fraction and rng.random() < spec.bad_fraction:
            kind, payload = _bad_pageview(rng, event, ts, cents)
        else:
            payload = _dumps(event)
        yield GeneratedRecord(event["user"]["id"].encode(), payload, arrival, kind)


def _bad_pageview(
    rng: random.Random, event: dict[str, Any], ts: int, cents: int
) -> tuple[str, bytes]:
    kind = PAGEVIEW_BAD_KINDS[rng.randrange(len(PAGEVIEW_BAD_KINDS))]
    broken = dict(event)
    if kind == "malformed_json":
        text = _dumps(event)
        return kind, text[: rng.randrange(1, len(text))]  # a proper prefix of an object
    if kind == "not_utf8":
        page = _dumps(event["page"])
        latin1 = b'"/caf\xe9' + page[1:]  # "/café/..." in Latin-1: 0xe9 + "/" is not UTF-8
        return kind, _dumps(event).replace(b'"page":' + page, b'"page":' + latin1, 1)
    if kind == "not_object":
        return kind, rng.choice([_dumps([event]), _dumps(json.dumps(event)), b"null"])
    if kind == "missing_user":
        del broken["user"]
    elif kind == "page_not_string":
        broken["page"] = {"path": event["page"], "query": "utm_source=mail"}
    elif kind == "time_without_offset":
        broken["ts"] = _naive_time(ts)
    elif kind == "revenue_too_precise":
        broken["revenue"] = round(cents / 100 + 0.005, 3)  # e.g. 1.005
    elif kind == "revenue_nan":
        broken["revenue"] = float("nan")  # json.dumps writes NaN, which is not JSON
    else:
        broken["revenue"] = f"{cents / 100:.2f}"
    return kind, _dumps(broken)


# --------------------------------------------------------------------------- pipelines

# Every JSON path a pageview has: a pipeline reading only these (time in ISO-8601 or the Kafka
# timestamp) is fed pageviews by default; any other pipeline is fed clicks.
PAGEVIEW_PATHS = frozenset(
    {("event_id",), ("ts",), ("page",), ("user", "id"), ("user", "country"), ("revenue",),
     ("duration_ms",), ("referrer",)}
)


def shape_for(event: EventConfig) -> str:
    """The generator shape whose records match a pipeline's declared event."""
    paths = {spec.path for spec in event.fields.values()}
    if event.time.field:
        paths.add(event.time.path)
    if event.time.format in ("iso8601", "kafka_timestamp") and paths <= PAGEVIEW_PATHS:
        return "pageviews"
    return "clicks"


def generator_options(config: PipelineConfig, shape: str | None = None) -> dict[str, Any]:
    """``GeneratorSpec`` fields that make generated records fit ``config``'s declared event:
    the shape (``shape`` or :func:`shape_for`) and, for clicks, the JSON names of its key (the
    first string field, preferring a group_by field), time (epoch ms) and value (the first
    numeric field) when the pipeline declares them as top-level fields."""
    shape = shape or shape_for(config.event)
    if shape not in SHAPES:
        raise ValueError(f"unknown generator shape {shape!r}; known: {', '.join(SHAPES)}")
    options: dict[str, Any] = {"shape": shape}
    if shape != "clicks":
        return options
    event = config.event
    top = {name: spec for name, spec in event.fields.items() if len(spec.path) == 1}
    time = event.time.path[0] if event.time.format == "epoch_ms" and len(
        event.time.path) == 1 else None
    # By name first (a field called key or value), then by type; never the time field.
    strings = [n for n in ("key", *config.group_by, *top)
               if n in top and top[n].type.name == "string"]
    numbers = [n for n in ("value", *top) if n in top and top[n].type.numeric
               and top[n].path[0] != (time or "ts")]
    if strings:
        options["key_field"] = top[strings[0]].path[0]
    if numbers:
        options["value_field"] = top[numbers[0]].path[0]
        options["value_whole"] = top[numbers[0]].type.name == "long"
    if time is not None:
        options["time_field"] = time
    # What every clicks record holds: its three fields (under their default names when the
    # event does not name them) and its id.
    filled = {options.get("key_field", "key"), options.get("value_field", "value"),
              options.get("time_field", "ts"), "event_id"}
    unfilled = [n for n, spec in event.fields.items()
                if not spec.optional and spec.path[0] not in filled]
    if unfilled and event.format == "json":  # registry formats have producers of their own
        raise ConfigError(
            f"pipeline '{config.name}': the generator's clicks fill a key (string), a value "
            f"(number) and an epoch_ms time, and this event also requires {unfilled}: every "
            "record would be quarantined. Produce your own records, or make those fields "
            "optional")
    return options
