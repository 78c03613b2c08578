"""The embedded object store (``eos store``): a real SeaweedFS, loopback only, keys required."""

from __future__ import annotations

import json
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.fs as pa_fs
import pytest

from eos.core.processes import alive
from eos.tools import object_store

pytestmark = [pytest.mark.integration]


def http_status(url: str, method: str = "GET") -> int:
    request = urllib.request.Request(url, method=method, data=b"x" if method == "PUT" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_private_store_on_loopback_that_requires_keys(tmp_path: Path) -> None:
    state = object_store.start(tmp_path)
    try:
        home = object_store.home(tmp_path)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for name in ("credentials.json", "s3.json", "security.toml", "state.json"):
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
        variables = object_store.env(tmp_path)
        assert variables["AWS_SECRET_ACCESS_KEY"] not in json.dumps(state)
        assert variables["AWS_SECRET_ACCESS_KEY"] not in (home / "state.json").read_text()
        assert state["endpoint"].startswith("http://127.0.0.1:")
        # Every listener is on loopback only.
        listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
        ports = {int(line.split()[1].split(":")[1], 16): line.split()[1].split(":")[0]
                 for line in listening if line.split()[3] == "0A"}
        for name, port in state["ports"].items():
            assert ports.get(port) == "0100007F", (name, port, ports.get(port))
        # S3 without keys or with wrong ones: refused; the internal services want a JWT.
        bucket = state["bucket"]
        assert http_status(f"{state['endpoint']}/{bucket}/") == 403
        wrong = pa_fs.S3FileSystem(access_key=variables["AWS_ACCESS_KEY_ID"],
                                   secret_key="not-the-secret",
                                   endpoint_override=state["endpoint"], region="us-east-1")
        with pytest.raises(OSError, match=r"SIGNATURE_DOES_NOT_MATCH|ACCESS_DENIED"):
            wrong.get_file_info(pa_fs.FileSelector(bucket))
        filer = state["ports"]["filer"]
        assert http_status(f"http://127.0.0.1:{filer}/buckets/{bucket}/") == 401
        assert http_status(f"http://127.0.0.1:{filer}/buckets/{bucket}/x", "PUT") == 401
        assert http_status(f"http://127.0.0.1:{state['ports']['volume']}/1,01") == 401
        # With the keys: a write and a read.
        store = pa_fs.S3FileSystem(access_key=variables["AWS_ACCESS_KEY_ID"],
                                   secret_key=variables["AWS_SECRET_ACCESS_KEY"],
                                   endpoint_override=state["endpoint"], region="us-east-1")
        with store.open_output_stream(f"{bucket}/hello") as out:
            out.write(b"hello")
        with store.open_input_stream(f"{bucket}/hello") as found:
            assert found.read() == b"hello"
        assert object_store.start(tmp_path)["pid"] == state["pid"]  # a healthy one is reused
    finally:
        assert object_store.stop(tmp_path)
    assert not alive(state["pid"])
    assert object_store.status(tmp_path) is None
