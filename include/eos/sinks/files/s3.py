"""S3's conditional create (``PUT`` with ``If-None-Match: *``) for the ``files`` sink's
manifests, through obstore (the Rust ``object_store`` crate's S3 client): pyarrow's S3
filesystem writes unconditionally, and obstore's ``put(..., mode="create")`` is exactly the
conditional write, signed and retried by a maintained client instead of by code of our own.

Endpoint and credentials are the variables pyarrow and delta-rs read (``eos.core.storage``):
``AWS_ENDPOINT_URL`` (unset: AWS, virtual-hosted style; set: path style, ``http://`` allowed
for a store such as SeaweedFS or MinIO on a private network), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``,
default ``us-east-1``). No secret is logged or put in an error message: an error names the
object, the HTTP status and S3's error code, never obstore's text (which may echo a request).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from eos.core.errors import SinkUnavailable

if TYPE_CHECKING:
    from obstore.store import ClientConfig, S3Config

__all__ = ["put_if_absent"]

TIMEOUT = timedelta(seconds=30)
RETRIES = 3  # obstore retries 5xx and connection errors; the protocol retries the commit too
_STATUS = re.compile(r"status(?: code)?:? ([1-5]\d\d)\b", re.IGNORECASE)
_CODE = re.compile(r"<Code>([A-Za-z]{1,64})</Code>")


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _config() -> tuple[S3Config, ClientConfig]:
    """The S3 settings and the HTTP client's, from the ``AWS_*`` variables."""
    config: S3Config = {"region": _region(), "conditional_put": "etag"}
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        config["access_key_id"] = os.environ["AWS_ACCESS_KEY_ID"]
    if os.environ.get("AWS_SECRET_ACCESS_KEY"):
        config["secret_access_key"] = os.environ["AWS_SECRET_ACCESS_KEY"]
    if os.environ.get("AWS_SESSION_TOKEN"):
        config["session_token"] = os.environ["AWS_SESSION_TOKEN"]
    client: ClientConfig = {"timeout": TIMEOUT, "connect_timeout": TIMEOUT}
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "").rstrip("/")
    if endpoint:  # a store of one's own: path style (buckets need no DNS names)
        config["endpoint"] = endpoint
        config["virtual_hosted_style_request"] = False
        client["allow_http"] = urlparse(endpoint).scheme == "http"
    else:  # AWS: virtual-hosted style, the one new buckets take
        config["virtual_hosted_style_request"] = True
    return config, client


def _store(bucket: str) -> Any:
    from obstore.store import S3Store

    config, client = _config()
    return S3Store(bucket, config=config, client_options=client,
                   retry_config={"max_retries": RETRIES, "retry_timeout": TIMEOUT})


def _described(error: Exception) -> str:
    """``HTTP <status> <S3 code>`` found in obstore's message, or the error's type: the
    message itself is never shown."""
    text = str(error)
    status, code = _STATUS.search(text), _CODE.search(text)
    parts = [f"HTTP {status.group(1)}" if status else type(error).__name__]
    if code:
        parts.append(code.group(1))
    return " ".join(parts)


def put_if_absent(uri: str, data: bytes) -> bool:
    """Create the object ``uri`` holding ``data`` unless it exists: True when this request
    created it, False when it exists. obstore reports S3's ``412`` and also its ``409`` (a
    concurrent conditional write still in flight, whose outcome is unknown) as
    ``AlreadyExistsError``, so False is only answered once the object is seen; otherwise, and
    for any other failure, ``SinkUnavailable``: the caller retries, and the retry finds the
    object or creates it. A lost race taken for one whose winner then failed would lose the
    epoch."""
    import obstore
    from obstore.exceptions import AlreadyExistsError, BaseError

    parsed = urlparse(uri)
    store, key = _store(parsed.netloc), parsed.path.lstrip("/")
    try:
        obstore.put(store, key, data, mode="create", use_multipart=False)
        return True
    except AlreadyExistsError as refused:
        if _exists(store, key, uri):
            return False
        raise SinkUnavailable(f"conditional put of {uri} refused ({_described(refused)}) while "
                              "the object does not exist: a concurrent write in flight") \
            from None
    except (BaseError, OSError, ValueError) as error:
        raise SinkUnavailable(f"conditional put of {uri} failed: {_described(error)}") \
            from None


def _exists(store: Any, key: str, uri: str) -> bool:
    import obstore
    from obstore.exceptions import BaseError

    try:
        obstore.head(store, key)
    except FileNotFoundError:
        return False
    except (BaseError, OSError) as error:
        raise SinkUnavailable(f"reading {uri} after a refused conditional put failed: "
                              f"{_described(error)}") from None
    return True
