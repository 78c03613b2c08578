"""The audit's second readers, which share no library with the pipeline: Kafka through aiokafka,
Delta, PostgreSQL and Iceberg through DuckDB's extensions (``compare`` sets the two readings
side by side).
"""
