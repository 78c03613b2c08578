"""The Iceberg sink (``sink``): one snapshot per epoch through pyiceberg; its options, catalog,
schema checks, snapshot history and fill, one module each.
"""
