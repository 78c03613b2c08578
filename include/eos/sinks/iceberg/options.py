"""The ``iceberg`` sink's options, and how its catalog properties take secrets from the
environment.

``{iceberg: {catalog: NAME, table: NAMESPACE.NAME, catalog_properties: {...}, shared: false}}``.
The catalog is looked up by ``NAME`` in pyiceberg's own configuration (``~/.pyiceberg.yaml``, or
``PYICEBERG_CATALOG__<NAME>__<PROPERTY>`` variables: REST, Glue, Hive, SQL, ...);
``catalog_properties`` adds to it or overrides it from the pipeline file. A property value may
name environment variables as ``${VAR}``: they are read when the sink connects, never when the
file loads, and their values are secrets the sink keeps out of every message and log line
(``secrets_of``). A property that holds a secret by its name (a password, a token, a secret or
access key, a credential) must be given that way: a literal one would sit in a pipeline file,
and is refused when the file loads.

Nothing here imports pyiceberg: the DAG file parses these options.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eos.core.errors import ConfigError

__all__ = ["SQLITE_RELATIVE", "IcebergOptions", "expand", "is_secret_property"]

_PART = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
TABLE = re.compile(rf"^{_PART}(?:\.{_PART})+$")
CATALOG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")
SQLITE_RELATIVE = re.compile(r"^sqlite:///(?!/)")  # a SQLite file named relatively
REFERENCE = re.compile(r"\$\{([^}]*)\}")
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
URL_PASSWORD = re.compile(r"://[^/@\s:]*:([^/@\s]+)@")  # scheme://user:PASSWORD@host
# Property names whose values are credentials (pyiceberg's and its FileIOs' names contain these).
SECRET_NAME = re.compile(r"(password|secret|token|credential|private|access-key|key-id|"
                         r"account-key|sas|session)", re.IGNORECASE)


def is_secret_property(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


class IcebergOptions(BaseModel):
    """``{iceberg: {catalog, table, catalog_properties, shared}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    catalog: str = Field(description=(
        "The catalog's name in pyiceberg's configuration (~/.pyiceberg.yaml or "
        "PYICEBERG_CATALOG__<NAME>__* variables)."))
    table: str = Field(description="namespace.name of the table this sink writes (its alone); "
                                   "created on the first epoch unless it exists.")
    catalog_properties: dict[str, str] = Field(default_factory=dict, description=(
        "Catalog properties added to pyiceberg's configuration; ${VAR} takes a value from the "
        "environment (required for secrets). A relative SQLite uri (sqlite:///NAME) or "
        "warehouse is under the pipeline's tables root."))
    shared: bool = Field(default=False, description=(
        "Other pipelines may write this table too, if each declares it shared; unset, the "
        "first pipeline to begin on it owns it (its table properties eos.writers and "
        "eos.shared record who writes it) and any other is refused before its first commit."))

    @field_validator("catalog")
    @classmethod
    def _catalog(cls, value: str) -> str:
        if not CATALOG.match(value):
            raise ValueError(f"a catalog name is letters, digits, _ and -, got {value!r}")
        return value

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        if not TABLE.match(value):
            raise ValueError("a table is named namespace.name (letters, digits, _), got "
                             f"{value!r}")
        return value

    @field_validator("catalog_properties")
    @classmethod
    def _properties(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name.strip():
                raise ValueError("a property has an empty name")
            for variable in REFERENCE.findall(text):
                if not VARIABLE.match(variable):
                    raise ValueError(f"property {name!r}: ${{{variable}}} does not name an "
                                     "environment variable")
            if is_secret_property(name) and not REFERENCE.fullmatch(text.strip()):
                raise ValueError(f"property {name!r} holds a secret: give it as ${{VARIABLE}} "
                                 "and set the variable in the environment, never in the file")
            password = URL_PASSWORD.search(text)
            if password and not REFERENCE.fullmatch(password.group(1)):
                raise ValueError(f"property {name!r} holds a password in its URL: give it as "
                                 "${VARIABLE} and set the variable in the environment")
        return value

    @property
    def identifier(self) -> tuple[str, ...]:
        return tuple(self.table.split("."))


def expand(properties: Mapping[str, str],
           environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The properties with every ``${VAR}`` replaced by the variable's value, and those values
    (the secrets to keep out of messages). A variable that is not set is a ``ConfigError``
    naming the property and the variable."""
    env = os.environ if environ is None else environ
    secrets: list[str] = []

    def value_of(name: str, match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in env:
            raise ConfigError(f"iceberg catalog property {name!r} takes ${{{variable}}}, which "
                              "is not set in the environment")
        found = env[variable]
        if found:
            secrets.append(found)
        return found

    expanded = {name: REFERENCE.sub(lambda m, n=name: value_of(n, m), text)  # type: ignore[misc]
                for name, text in properties.items()}
    return expanded, secrets
