"""The PostgreSQL sink (``sink``): an epoch's rows and its marker row in one transaction; its
connection, SQL, types, read-back and fill, one module each.
"""
