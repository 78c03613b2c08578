"""Fixtures of the embedded object store (SeaweedFS's S3 gateway,
``eos.tools.servers.object_store``):
a real S3 server on 127.0.0.1 for the whole session, started only when a test asks for it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eos.core.processes import restored_environ

__all__ = ["object_store", "s3_root"]


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str
    bucket: str
    env: dict[str, str] = field(repr=False)  # the AWS_* variables, the secret included


@pytest.fixture(scope="session")
def object_store(data_dir: Path) -> Iterator[ObjectStore]:
    """The store, with its ``AWS_*`` variables in this process's environment for the session
    (processes started afterwards, the Spark servers and ``eos`` commands, inherit them)."""
    from eos.tools.servers import object_store as store
    state = store.start(data_dir)
    variables = store.env(data_dir)
    try:
        with restored_environ(variables):
            os.environ.update(variables)
            yield ObjectStore(state["endpoint"], state["bucket"], variables)
    finally:
        store.stop(data_dir)


@pytest.fixture
def s3_root(object_store: ObjectStore) -> str:
    """A fresh prefix of the store's bucket for one test's tables."""
    return f"s3://{object_store.bucket}/t-{uuid.uuid4().hex[:10]}"
