"""A Kafka sink's transactional producer: made with the sink's fixed ``transactional.id`` and
fenced (``init_transactions``), rows produced while the client's queue drains, the commit
retried while the broker calls its failure retriable, and refusals told from transient
failures."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eos.core.errors import InjectedFault, SinkRejected, SinkUnavailable, TransactionAborted
from eos.core.outcomes import Outcome
from eos.core.sink import SinkCommit
from eos.sinks.kafka.topics import TIMEOUT_S, kafka_error

if TYPE_CHECKING:
    import confluent_kafka as ck

# How long an abort may wait: a producer whose epoch bump keeps failing never finishes one,
# and the next ``init_transactions`` of the id aborts the transaction on the broker anyway.
ABORT_TIMEOUT_S = 10.0


TRANSACTION_TIMEOUT_MS = 60_000


def fenced_producer(settings: dict[str, Any], transactional_id: str, sink: str) -> ck.Producer:
    """A producer of ``transactional_id`` after ``init_transactions``: every earlier producer
    of that id is fenced and its pending transaction aborted."""
    import confluent_kafka as ck

    producer = ck.Producer({
        **settings,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        # The sink's client may set it (a broker caps it at transaction.max.timeout.ms); a
        # transaction that outlives it is aborted by the broker and the commit retried.
        "transaction.timeout.ms": settings.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS),
        "partitioner": "murmur2_random",  # Java clients' partitioner: same key, same partition
        "linger.ms": 20,
    })
    try:
        producer.init_transactions(TIMEOUT_S)
    except ck.KafkaException as error:
        if _is_rejection(kafka_error(error)):  # the principal may not use the id: for good
            raise SinkRejected(
                f"Kafka sink {sink}: the broker refuses transactional id '{transactional_id}' "
                f"to this principal ({kafka_error(error)}): grant it WRITE on that "
                "transactional id (kafka-acls --transactional-id ... --operation Write), or set "
                "the sink's transactional_id_prefix to one it may use") from None
        raise SinkUnavailable(
            f"Kafka sink {sink}: init_transactions for '{transactional_id}' failed: "
            f"{kafka_error(error)}"
        ) from None
    return producer


def produce_rows(producer: ck.Producer, topic: str, sink: str,
                 headers: list[tuple[str, bytes]], keys: list[bytes | None],
                 values: list[bytes],
                 own: list[list[tuple[str, bytes | None]]] | None = None) -> None:
    """Every record into ``topic`` inside the open transaction, in order, delivered before it
    returns; a refusal (``SinkRejected``) or a transient failure (``SinkUnavailable``)
    otherwise. ``headers`` go on every record, then each record's ``own``. One idempotent
    producer keeps the order of a partition's records: records of one key (one partition) land
    in the order given."""
    import confluent_kafka as ck

    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        mine = headers + own[i] if own and own[i] else headers
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=mine,
                                 on_delivery=delivered)
                break
            except BufferError:  # the client's queue is full: let it drain
                producer.poll(0.1)
            except ck.KafkaException as error:  # refused before it left the client
                failures.append(kafka_error(error))
                break
        if failures:
            break
    if producer.flush(TIMEOUT_S) > 0:
        raise SinkUnavailable(f"Kafka sink {sink}: rows not delivered within "
                              f"{TIMEOUT_S:.0f}s")
    if failures:
        first = failures[0]
        kind = SinkRejected if _is_rejection(first) else SinkUnavailable
        raise kind(f"Kafka sink {sink}: cannot write to topic '{topic}': "
                   f"{first} ({len(failures)} records refused)")


def commit_transaction(producer: ck.Producer) -> None:
    """Commit the open transaction, retried (up to five times) while its failure is
    retriable."""
    import confluent_kafka as ck

    for attempt in range(5):
        try:
            producer.commit_transaction(TIMEOUT_S)
            return
        except ck.KafkaException as error:
            failure = kafka_error(error)
            if failure is not None and failure.retriable() and attempt < 4:
                time.sleep(0.5 * (attempt + 1))
                continue
            raise


def after_failed_transaction(producer: ck.Producer, error: Exception, sink: str, epoch: int,
                             rows: int, committed_epoch: Callable[[], int]) -> SinkCommit:
    """The transaction of ``epoch`` did not commit (``committed_epoch``: the sink's last
    marker's epoch, read fenced). Scenarios:
    - the broker fenced us (a newer attempt called ``init_transactions``): if that attempt
      committed N, report ``ALREADY_COMMITTED`` (raced); else retry (transient);
    - the transaction must be aborted (a produce failed): abort, then re-raise typed;
    - anything else: abort if possible, and retry (transient).
    Nothing of N is visible to ``read_committed`` consumers in any of these cases.
    """
    failure = kafka_error(error)
    fatal = getattr(failure, "fatal", lambda: False)()
    if not fatal:
        # If this fails too, the next attempt's init_transactions aborts the transaction.
        with contextlib.suppress(Exception):
            producer.abort_transaction(ABORT_TIMEOUT_S)
    if isinstance(error, SinkRejected | InjectedFault):
        raise error
    if isinstance(error, SinkUnavailable):  # a produce failed: the transaction is over
        raise TransactionAborted(error.message) from None
    if committed_epoch() >= epoch:
        return SinkCommit(sink, Outcome.ALREADY_COMMITTED, rows, raced=True)
    kind = SinkUnavailable if fatal else TransactionAborted
    raise kind(
        f"Kafka sink {sink}: transaction for epoch {epoch} did not commit "
        f"({failure or error}); nothing of it is visible, retrying is safe"
    ) from None


def _is_rejection(error: Any) -> bool:
    import confluent_kafka as ck

    code = error.code() if hasattr(error, "code") else None
    return code in (ck.KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                    ck.KafkaError.MSG_SIZE_TOO_LARGE, ck.KafkaError.RECORD_LIST_TOO_LARGE,
                    ck.KafkaError.INVALID_RECORD)
