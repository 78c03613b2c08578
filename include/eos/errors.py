"""Errors a person can act on. Each says what failed and what to do about it."""

import re

_WRAPPED = re.compile(r"eos\.errors\.(\w+): (.+)")


class EosError(Exception):
    """Base class: the message is meant for an operator, not a stack trace reader."""


class ConfigError(EosError):
    """A pipeline config is missing, unreadable or invalid."""


class KafkaUnavailable(EosError):
    """The broker cannot be reached or does not answer in time."""


class TopicMissing(EosError):
    """The configured topic does not exist on the broker."""


class DataLoss(EosError):
    """Records an epoch must read are no longer in Kafka (retention, truncation)."""


class ProtocolViolation(EosError):
    """The tables contradict the protocol's invariants; never repaired silently."""


def describe_failure(error: BaseException) -> str:
    """The operator's message inside a Spark job failure: an EosError raised on an executor
    reaches the driver wrapped in a Java stack trace; pull the original message back out."""
    match = _WRAPPED.search(str(error))
    if match:
        return f"{match.group(1)}: {match.group(2).strip()}"
    first = str(error).strip().splitlines()
    return f"{type(error).__name__}: {first[0] if first else ''}"
