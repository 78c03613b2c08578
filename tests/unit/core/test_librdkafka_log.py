"""librdkafka's lines reach Python's logging (``eos.librdkafka``) less the one a consumer's
unused group-coordinator connection logs when torn down mid-authentication."""

from __future__ import annotations

import logging

from eos.core.kafka import LIBRDKAFKA_LOG


def _passes(message: str) -> bool:
    record = logging.LogRecord(LIBRDKAFKA_LOG.name, logging.ERROR, __file__, 1, "%s", (message,),
                               None)
    return LIBRDKAFKA_LOG.filter(record)


def test_the_coordinator_teardown_is_dropped_and_every_other_line_passes() -> None:
    assert not _passes("FAIL [rdkafka#consumer-45] [thrd:GroupCoordinator]: GroupCoordinator: "
                       "SASL authentication error: SaslAuthenticateRequest failed: Local: "
                       "Broker transport failure (after 0ms in state DOWN)")
    assert _passes("FAIL [rdkafka#consumer-1] [thrd:127.0.0.1:9092/1]: SASL authentication "
                   "error: Authentication failed during authentication due to invalid "
                   "credentials with SASL mechanism SCRAM-SHA-256")
    assert _passes("GETPID [rdkafka#producer-1] [thrd:main]: Failed to acquire idempotence PID")
