"""Compute for ``precommit``: epoch N's rows with Spark, in the shape staged in one Delta commit.

Staged rows are a pure function of the plan and epoch N-1's committed state, so a rerun, a retry
or a zombie attempt writes the same rows: recovery never produces a different result. The
decisions (is N committed, already staged, may it be written) live in ``eos.core.protocol``.

The steps, one module each: ``resume`` (where N-1 left off), ``read`` (the plan's Kafka ranges,
parsed), ``watermark`` (wm(N)), ``frames`` (windows, late split, state merge, side rows),
``write`` (the staging files) and ``stager`` (``SparkStager``, which runs them in order).
docs/design.md ("Stage") draws the sequence.
"""
