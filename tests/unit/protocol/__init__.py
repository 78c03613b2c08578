"""The fast tier: the protocol's state machine on real Delta tables (delta-rs, local temporary
directories), with an in-process source, stager and sinks: no Spark, no broker. Every test here
is marked ``fast``; run the tier alone with ``pytest -m fast``."""
