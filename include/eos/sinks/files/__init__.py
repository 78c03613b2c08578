"""The files sink (``sink``): Parquet or JSON lines files in a directory or an object-store prefix,
Hive-style partitions, one manifest per epoch; its options, layout, stores, read-back and fill,
one module each.
"""
