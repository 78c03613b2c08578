"""Errors a person can act on. Each says what failed and what to do about it."""


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
