"""Where a Schema Registry format (``event.format``, a Kafka sink's ``format``) finds its writer
schemas, and the names of the credentials it asks with."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from eos.core.config.values import DurationMs, Strict

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaRegistryConfig(Strict):
    """Where a Schema Registry format finds its writer schemas (``eos.compute.formats``).

    Credentials are never in this file: ``auth_env`` names an environment variable holding
    ``user:password`` (HTTP basic auth), ``connection`` names an Airflow connection (its login
    and password). Only these names travel to the Spark workers, which read the secret
    themselves; the URL may not carry one."""

    url: str = Field(description="http(s)://host[:port] of the registry, without credentials.")
    auth_env: str | None = Field(
        default=None,
        description="The name of an environment variable holding user:password (HTTP basic "
                    "auth), set wherever records are decoded (the Spark executors too).")
    connection: str | None = Field(
        default=None,
        description="The id of an Airflow connection whose login and password the registry "
                    "takes (event sources only; not with auth_env).")
    # One request; a registry slower than this is down (a transient error).
    timeout: DurationMs = Field(
        default=10_000,
        description="How long one request may take; a slower registry counts as down and the "
                    "epoch is retried.")

    @field_validator("url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"schema_registry.url must be http(s)://host[:port], got {url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("schema_registry.url may not carry credentials: name them with "
                             "auth_env (a variable holding user:password) or connection")
        return url.rstrip("/")

    @field_validator("auth_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(f"schema_registry.auth_env is the name of an environment variable "
                             f"(letters, digits, _), got {name!r}")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> SchemaRegistryConfig:
        if self.auth_env and self.connection:
            raise ValueError("schema_registry: give auth_env or connection, not both")
        return self
