"""S3's conditional create (``PUT`` with ``If-None-Match: *``) for the ``files`` sink's
manifests: pyarrow's S3 filesystem writes unconditionally, and no S3 client library is a
dependency, so this one request is signed here (AWS Signature Version 4, standard library only).

Endpoint and credentials are the variables pyarrow and delta-rs read (``eos.core.storage``):
``AWS_ENDPOINT_URL`` (unset: AWS, virtual-hosted style), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``,
default ``us-east-1``). No secret is logged or put in an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import urllib.error
import urllib.request
from datetime import UTC, datetime
from urllib.parse import quote, urlparse

from eos.core.errors import SinkUnavailable

TIMEOUT_S = 30


def _url(uri: str) -> tuple[str, str, str]:
    """The request URL, host and canonical path of ``s3://bucket/key``."""
    parsed = urlparse(uri)
    bucket, key = parsed.netloc, quote(parsed.path.lstrip("/"), safe="/-_.~")
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "").rstrip("/")
    if endpoint:
        base = urlparse(endpoint)
        path = f"{base.path.rstrip('/')}/{bucket}/{key}"
        return f"{base.scheme}://{base.netloc}{path}", base.netloc, path
    host = f"{bucket}.s3.{_region()}.amazonaws.com"
    return f"https://{host}/{key}", host, f"/{key}"


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(host: str, path: str, data: bytes, now: datetime) -> dict[str, str]:
    """The headers of a signed conditional ``PUT`` of ``data`` to ``path`` on ``host``."""
    access = os.environ.get("AWS_ACCESS_KEY_ID", "")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "if-none-match": "*",
               "x-amz-content-sha256": hashlib.sha256(data).hexdigest(), "x-amz-date": stamp}
    token = os.environ.get("AWS_SESSION_TOKEN")
    if token:
        headers["x-amz-security-token"] = token
    names = ";".join(sorted(headers))
    canonical = "\n".join(["PUT", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)),
                           "", names, headers["x-amz-content-sha256"]])
    scope = f"{day}/{_region()}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), _region()), "s3"),
                "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                                f"SignedHeaders={names}, Signature={signature}")
    return headers


def put_if_absent(uri: str, data: bytes) -> bool:
    """Create the object ``uri`` holding ``data`` unless it exists: True when this request
    created it, False when it existed (``412``). A ``409`` (a concurrent conditional write in
    flight) and any other failure are ``SinkUnavailable``: the caller retries, and the retry
    finds the object or creates it."""
    url, host, path = _url(uri)
    headers = signed_headers(host, path, data, datetime.now(UTC))
    request = urllib.request.Request(url, data=data, method="PUT",
                                     headers={k: v for k, v in headers.items() if k != "host"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return 200 <= response.status < 300
    except urllib.error.HTTPError as error:
        if error.code == 412:
            return False
        code = _error_code(error)
        raise SinkUnavailable(f"conditional put of {uri} failed: HTTP {error.code} {code}") \
            from None
    except (urllib.error.URLError, OSError) as error:
        raise SinkUnavailable(f"conditional put of {uri} failed: {error}") from None


def _error_code(error: urllib.error.HTTPError) -> str:
    """S3's error code from the response body (``<Code>...</Code>``), never the body whole."""
    body = error.read(4096).decode("utf-8", "replace")
    start, end = body.find("<Code>"), body.find("</Code>")
    return body[start + 6:end] if 0 <= start < end else ""
