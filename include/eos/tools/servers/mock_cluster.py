"""librdkafka's mock cluster, owned directly through librdkafka's C API.

confluent-kafka starts a mock cluster for a client configured with ``test.mock.num.brokers``
but keeps the cluster's handle to itself, so a topic can only be auto-created, with the mock's
default of 4 partitions. librdkafka exports the mock API (``rd_kafka_mock_cluster_new``,
``rd_kafka_mock_topic_create``; rdkafka_mock.h), so the embedded broker calls it with ctypes
from the very library confluent-kafka's wheel ships. That lets a topic have the partitions it
needs: the mock keeps at most 5 MiB per partition and silently drops the oldest message sets
beyond that (rdkafka_mock.c), so partitions are the mock's only way to hold more.

The mock is a test double, not a broker: it does not filter ``read_committed`` and does not
fence transactional ids (docs/guarantees.md). It does not answer the Admin API's CreateTopics
either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

from eos.core.errors import BrokerUnavailable

DEFAULT_PARTITIONS = 4  # what the mock gives a topic auto-created by a metadata request
RETAINED_BYTES_PER_PARTITION = 5 * 1024 * 1024  # rdkafka_mock.c: mpart->max_size
_PRODUCER = 0  # rd_kafka_type_t RD_KAFKA_PRODUCER
_ERRSTR = 512


def library_path() -> str:
    """The librdkafka confluent-kafka uses: the wheel's bundled copy, else the system's."""
    import confluent_kafka

    package = Path(confluent_kafka.__file__).parent
    bundled = package.parent / "confluent_kafka.libs"  # Linux wheels (auditwheel)
    shipped = sorted([*bundled.glob("librdkafka*.so*"),
                      *(package / ".dylibs").glob("librdkafka*.dylib")])  # macOS (delocate)
    if shipped:
        return str(shipped[0])
    found = ctypes.util.find_library("rdkafka")
    if found is None:
        raise BrokerUnavailable("librdkafka not found: neither confluent-kafka's bundled copy "
                               f"under {bundled} nor a system library")
    return found


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    signatures = {
        "rd_kafka_conf_new": (p, []),
        "rd_kafka_conf_set": (i, [p, s, s, s, ctypes.c_size_t]),
        "rd_kafka_new": (p, [i, p, s, ctypes.c_size_t]),
        "rd_kafka_poll": (i, [p, i]),
        "rd_kafka_destroy": (None, [p]),
        "rd_kafka_mock_cluster_new": (p, [p, i]),
        "rd_kafka_mock_cluster_bootstraps": (s, [p]),
        "rd_kafka_mock_cluster_destroy": (None, [p]),
        "rd_kafka_mock_topic_create": (i, [p, s, i, i]),
        "rd_kafka_mock_push_request_errors_array":
            (None, [p, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(i)]),
        "rd_kafka_err2str": (s, [i]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class MockCluster:
    """One mock cluster and the client handle that owns it; lives until ``close``."""

    def __init__(self, brokers: int = 1, log_level: int = 3) -> None:
        try:
            self._lib = _bind(ctypes.CDLL(library_path()))
        except (OSError, AttributeError) as exc:
            raise BrokerUnavailable(f"cannot use librdkafka's mock API: {exc}") from exc
        err = ctypes.create_string_buffer(_ERRSTR)
        conf = self._lib.rd_kafka_conf_new()
        if self._lib.rd_kafka_conf_set(conf, b"log_level", str(log_level).encode(), err,
                                       _ERRSTR) != 0:
            raise BrokerUnavailable(f"librdkafka config: {err.value.decode()}")
        # rd_kafka_new takes ownership of conf, also when it fails.
        self._rk = self._lib.rd_kafka_new(_PRODUCER, conf, err, _ERRSTR)
        if not self._rk:
            raise BrokerUnavailable(f"librdkafka client: {err.value.decode()}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            raise BrokerUnavailable("librdkafka refused to create a mock cluster")
        self.bootstrap: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int = DEFAULT_PARTITIONS) -> None:
        """Create ``name`` with ``partitions`` partitions (replication factor 1)."""
        code = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        if code != 0:
            reason = self._lib.rd_kafka_err2str(code).decode()
            raise BrokerUnavailable(f"mock cluster: cannot create topic {name!r} with "
                                   f"{partitions} partitions: {reason}")

    def push_request_errors(self, api_key: int, errors: list[int]) -> None:
        """Answer the next ``len(errors)`` requests of ``api_key`` with these error codes, one
        each, in order (the mock's own fault injection; a code of 0 lets a request through)."""
        codes = (ctypes.c_int * len(errors))(*errors)
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster, api_key, len(errors),
                                                           codes)

    def serve(self, timeout_ms: int) -> None:
        """Serve the owning handle's queue (its logs and errors) for up to ``timeout_ms``."""
        self._lib.rd_kafka_poll(self._rk, timeout_ms)

    def close(self) -> None:
        if self._cluster:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._cluster = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None
