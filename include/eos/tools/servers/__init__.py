"""The servers eos starts on this machine for a user or a test: the embedded broker (librdkafka's
mock cluster) or Apache Kafka, the SeaweedFS object store, PostgreSQL, a Schema Registry, the
Spark standalone cluster and the Spark Connect server. Each binds to 127.0.0.1 and requires a
token, a password or keys.
"""
