"""Benchmarks: the cost of exactly-once, phase by phase, and how it scales.

``python -m bench`` (``./dev bench``) runs the exactly-once path of ``eos`` (begin -> precommit
-> commit) on the embedded broker next to an at-least-once baseline, a bare Kafka consumer and
the Spark read stage alone, and prints every figure; see ``docs/benchmarks.md``.
"""
