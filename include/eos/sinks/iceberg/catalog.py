"""The ``iceberg`` sink's catalog: its properties, where its relative places are, the
credentials of its object store, and errors that carry no secret.

Properties are pyiceberg's configuration of the catalog (``~/.pyiceberg.yaml``,
``PYICEBERG_CATALOG__<NAME>__*``, read afresh on each connection), with the sink's
``catalog_properties`` over them (their ``${VAR}`` expanded: ``eos.sinks.iceberg.options``).

Relative places are under the pipeline's tables root, as a Delta sink's table name is: a SQLite
``uri`` written ``sqlite:///NAME`` (three slashes and no fourth: SQLAlchemy would take it from
the working directory) and a ``warehouse`` without a scheme. A SQLite catalog needs a local
root; a warehouse may be on the root's store.

An ``s3://`` warehouse takes the endpoint and credentials the pipeline's tables use, the
``AWS_*`` variables (``eos.core.storage``), as pyiceberg's FileIO properties (``s3.endpoint``,
``s3.access-key-id``, ``s3.secret-access-key``, ``s3.session-token``, ``s3.region``) where the
catalog's configuration does not set them itself.

Every error leaving this module has its secrets replaced by ``***``: the expanded values, the
values of secret-named properties and the AWS secrets; its cause is dropped, so that no
traceback shows a driver's message either.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from eos.core.errors import ConfigError, EosError, SinkRejected, SinkUnavailable
from eos.core.extras import require
from eos.core.storage import is_remote, join
from eos.sinks.iceberg.options import SQLITE_RELATIVE, IcebergOptions, expand, is_secret_property

__all__ = ["CatalogSettings", "guarded", "open_catalog", "settings_for"]

SQLITE = "sqlite:///"
# AWS_* variable -> pyiceberg's S3 FileIO property (the variables delta-rs and pyarrow read).
S3_PROPERTIES = {"AWS_ENDPOINT_URL": "s3.endpoint", "AWS_ACCESS_KEY_ID": "s3.access-key-id",
                 "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
                 "AWS_SESSION_TOKEN": "s3.session-token", "AWS_REGION": "s3.region"}
S3_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


@dataclass(frozen=True)
class CatalogSettings:
    """A catalog's name and properties, ready for ``load_catalog``; ``secrets`` are the values
    no message may show."""

    name: str
    properties: dict[str, str] = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)

    def hide(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


def _configured(name: str) -> dict[str, Any]:
    """The catalog's properties in pyiceberg's configuration, read now (pyiceberg's own copy is
    read once, when it is imported)."""
    from pyiceberg.utils.config import Config

    return dict(Config().get_catalog_config(name.lower()) or {})


def _under_root(properties: dict[str, str], root: str) -> dict[str, str]:
    """A relative SQLite uri and a relative warehouse placed under the tables root."""
    placed = dict(properties)
    uri = placed.get("uri", "")
    if SQLITE_RELATIVE.match(uri):
        if is_remote(root):
            raise ConfigError(f"iceberg catalog uri {uri!r} is relative to the tables root "
                              f"{root}, which is not a local directory; give an absolute "
                              "sqlite:////path or another catalog")
        path = join(root, posixpath.normpath(uri[len(SQLITE):]))
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        placed["uri"] = f"sqlite:///{path}"
    warehouse = placed.get("warehouse", "")
    if warehouse and "://" not in warehouse and not warehouse.startswith("/"):
        placed["warehouse"] = join(root, posixpath.normpath(warehouse))
    return placed


def _s3_settings(properties: Mapping[str, Any]) -> dict[str, str]:
    """The AWS_* variables as S3 FileIO properties the configuration leaves unset."""
    found = {prop: os.environ[var] for var, prop in S3_PROPERTIES.items()
             if os.environ.get(var) and prop not in properties}
    region = os.environ.get("AWS_DEFAULT_REGION")
    if region and "s3.region" not in properties and "s3.region" not in found:
        found["s3.region"] = region
    return found


def settings_for(options: IcebergOptions, root: str) -> CatalogSettings:
    """The catalog's properties for a sink whose pipeline keeps its tables at ``root``."""
    require("iceberg", "an iceberg sink")
    configured = _configured(options.catalog)
    given, secrets = expand(options.catalog_properties)
    properties = {**{k: str(v) for k, v in configured.items() if not isinstance(v, dict)},
                  **_under_root(given, root)}
    properties.update(_s3_settings(properties))
    secrets += [str(v) for k, v in properties.items() if is_secret_property(k) and v]
    secrets += [os.environ[v] for v in S3_SECRETS if os.environ.get(v)]
    return CatalogSettings(options.catalog, properties, tuple(s for s in secrets if len(s) > 2))


def open_catalog(settings: CatalogSettings, sink: str) -> Any:
    """The pyiceberg catalog (its errors as eos errors without secrets)."""
    from pyiceberg.catalog import load_catalog

    with guarded(settings, sink, "opening its catalog"):
        return load_catalog(settings.name, **settings.properties)


def _transient(error: BaseException) -> bool:
    """Whether an error is the kind a retry may get past: the store or the catalog out of
    reach, a lock, a commit whose outcome is unknown."""
    from pyiceberg.exceptions import (
        AuthorizationExpiredError,
        CommitStateUnknownException,
        ServerError,
        ServiceUnavailableError,
        TooManyRequestsError,
        WaitingForLockException,
    )

    if isinstance(error, OSError | TimeoutError | ServerError | ServiceUnavailableError
                  | CommitStateUnknownException | TooManyRequestsError
                  | AuthorizationExpiredError | WaitingForLockException):
        return True
    try:
        from sqlalchemy.exc import InterfaceError, OperationalError
    except ImportError:
        return False
    return isinstance(error, OperationalError | InterfaceError)


@contextmanager
def guarded(settings: CatalogSettings, sink: str, doing: str) -> Iterator[None]:
    """Errors of pyiceberg, its catalogs and its FileIO as eos errors with the secrets hidden:
    ``SinkUnavailable`` when a retry may succeed (the commit is idempotent, so one is always
    safe), ``SinkRejected`` for a refused value or setting, ``ConfigError`` for a catalog
    pyiceberg cannot make. eos errors pass as they are."""
    try:
        yield
    except (EosError, AttributeError, NameError, AssertionError):  # ours, or a bug: as it is
        raise
    except Exception as error:  # every library error leaves here, without its secrets
        text = settings.hide(f"{type(error).__name__}: {error}")
        message = f"sink {sink}: {doing}: {text}"
        if _transient(error):
            raise SinkUnavailable(message) from None
        if isinstance(error, ValueError | TypeError | NotImplementedError) and \
                doing == "opening its catalog":
            raise ConfigError(message) from None
        if isinstance(error, ValueError | TypeError):
            raise SinkRejected(message) from None
        raise SinkUnavailable(message) from None


def without_retries(table: Any) -> Any:
    """``table`` with pyiceberg's own commit retries off, in this process only.

    After a conflict pyiceberg re-plans the snapshot on the new metadata and commits it again
    (``commit.retry.num-retries``, 4 by default): it would append an epoch a second time after
    another attempt committed it, or empty a table a commit just wrote to. The sink retries
    itself, reading the marker first. The setting is read from the table's metadata as this
    process loaded it; the catalog applies the commit's updates to its own copy, so the table
    itself keeps its properties."""
    from pyiceberg.table import TableProperties

    metadata = table.metadata
    properties = {**metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    table.metadata = metadata.model_copy(update={"properties": properties})
    return table
