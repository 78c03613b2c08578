"""``eos verify``: the independent audit (``verify``), its reference recomputation of the pipeline
from Kafka (``reference``, ``rows``, ``span``), the audit's own decoders (``avro``,
``protobuf``, ``json_schema``, ``kafka_records``), its checks and report, and the second readers
(``eos.tools.audit.verify.independent``).
"""
