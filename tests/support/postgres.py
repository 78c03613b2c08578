"""The tests' PostgreSQL server: eos's own (``eos.tools.servers.postgres_server``), which the demo
and
``eos chaos`` start too."""

from eos.tools.servers.postgres_server import PostgresServer, missing_reason, postgres_server

__all__ = ["PostgresServer", "missing_reason", "postgres_server"]
