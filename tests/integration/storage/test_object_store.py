"""The embedded object store (``eos store``): a real SeaweedFS, loopback only, keys required.

What the pipeline relies on is checked here against the store itself, not through the
pipeline: delta-rs and pyarrow talk to it with the ``AWS_*`` variables only, and of two Delta
commits racing for one version exactly one lands (the store's put-if-absent, the commit fence
on S3). What a local client without the keys gets on each port is in the module's docstring.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pa_fs
import pytest

from eos.core.errors import StoreUnavailable
from eos.core.processes import alive, group_members
from eos.tools.servers import object_store as store

from support.pipelines import SHIPPED_PIPELINES

pytestmark = [pytest.mark.integration]


def http_status(url: str, method: str = "GET") -> int:
    request = urllib.request.Request(url, method=method, data=b"x" if method == "PUT" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def tls_exchange(port: int, home: Path, with_certificate: bool = False) -> bytes:
    """An HTTP/1.1 request over TLS to 127.0.0.1:``port``, the server checked against the
    store's CA (in ``home``), with the store's client certificate or without any. The first
    bytes of the answer; ``ssl.SSLError`` (an ``OSError``) when the server refuses."""
    context = ssl.create_default_context(cafile=str(home / "ca.pem"))
    if with_certificate:
        context.load_cert_chain(home / "node.pem", home / "node.key")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /cluster/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return tls.recv(64)


def listeners(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on, from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.append((address, int(port, 16)))
    return found


def test_start_reuse_stop_and_the_private_files(tmp_path: Path) -> None:
    state = store.start(tmp_path)
    try:
        home = store.home(tmp_path)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for name in ("credentials.json", "s3.json", "security.toml", "state.json", "ca.pem",
                     "node.pem", "node.key", "weed.log"):
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
        variables = store.env(tmp_path)
        assert set(variables) == {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                  "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP"}
        assert variables["AWS_ENDPOINT_URL"] == state["endpoint"]
        on_disk = (home / "state.json").read_text()
        assert set(json.loads(on_disk)) >= {"pid", "endpoint", "bucket", "ports", "log"}
        for secret in (variables["AWS_SECRET_ACCESS_KEY"], (home / "node.key").read_text()):
            assert secret not in on_disk and secret not in json.dumps(state)
            assert secret not in (home / "weed.log").read_text()
        assert store.healthy(tmp_path)
        again = store.start(tmp_path)  # a healthy store is reused, keys and all
        assert again["pid"] == state["pid"]
        assert store.env(tmp_path) == variables
    finally:
        assert store.stop(tmp_path)
    assert not alive(state["pid"])
    assert group_members(state["pid"]) == []  # the whole process group is gone
    assert store.status(tmp_path) is None
    assert not store.healthy(tmp_path)
    assert not store.stop(tmp_path)


def test_only_loopback_and_only_with_the_keys(object_store: Any, data_dir: Path) -> None:
    """Every listener (S3, and the master, volume server and filer with their gRPC twins) is
    on 127.0.0.1; S3 wants the keys, every internal port wants the store's certificate."""
    state = store.status(data_dir)
    assert state is not None
    ports = state["ports"]
    bound = listeners(state["pid"])
    internal = [ports[name] for name in ("master", "volume", "filer")]
    assert sorted(port for _, port in bound) == sorted(
        [*ports.values(), *(port + 10000 for port in ports.values())])
    assert {address for address, _ in bound} == {"0100007F"}, bound  # 127.0.0.1, no IPv6
    # S3: without keys, or with a wrong secret, refused.
    bucket = object_store.bucket
    assert http_status(f"{object_store.endpoint}/{bucket}/") == 403
    assert http_status(f"{object_store.endpoint}/{bucket}/x", "PUT") == 403
    wrong = pa_fs.S3FileSystem(access_key=object_store.env["AWS_ACCESS_KEY_ID"],
                               secret_key="not-the-secret", endpoint_override=object_store.endpoint,
                               region="us-east-1")
    with pytest.raises(OSError, match=r"SIGNATURE_DOES_NOT_MATCH|ACCESS_DENIED|403"):
        wrong.get_file_info(pa_fs.FileSelector(bucket))
    # Internal HTTP: not served in plain text; over TLS, no session without the certificate.
    home = store.home(data_dir)
    for port in internal:
        assert http_status(f"http://127.0.0.1:{port}/dir/assign") == 400
        with pytest.raises(OSError):  # ssl.SSLError: the server demands a certificate
            assert not tls_exchange(port, home)
    control = tls_exchange(ports["master"], home, with_certificate=True)  # the certificate opens it
    assert control.startswith(b"HTTP/1.1 200"), control
    # gRPC (filer metadata, master assignments, volume needles): the same.
    for port in (*internal, ports["s3"]):
        with pytest.raises(OSError):
            assert not tls_exchange(port + 10000, home)


def test_delta_rs_writes_and_reads_and_pyarrow_lists(object_store: Any, s3_root: str) -> None:
    """Both libraries that touch table files, configured by the ``AWS_*`` variables alone."""
    from deltalake import DeltaTable, write_deltalake

    uri = f"{s3_root}/t"
    data = pa.table({"n": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]})
    write_deltalake(uri, data)
    write_deltalake(uri, data.slice(0, 1), mode="append")
    table = DeltaTable(uri)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 1, 2, 3]
    filesystem, path = pa_fs.FileSystem.from_uri(uri)
    files = [i.path for i in filesystem.get_file_info(pa_fs.FileSelector(path, recursive=True))
             if i.type == pa_fs.FileType.File]
    assert sum(p.endswith(".parquet") for p in files) == 2
    assert {p.rsplit("/", 1)[1] for p in files if "/_delta_log/" in p} == {
        "00000000000000000000.json", "00000000000000000001.json"}


def test_of_two_commits_racing_for_one_version_exactly_one_lands(object_store: Any,
                                                                  s3_root: str) -> None:
    """The store's put-if-absent (``If-None-Match: *``): two handles at one version append
    with the same ``txn`` app id; the first takes version 1, the second finds it taken and,
    the winner having carried its app id, fails instead of rebasing. Without put-if-absent
    both would "land", the second overwriting the first's commit file."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri = f"{s3_root}/race"
    data = pa.table({"n": pa.array([1], pa.int64())})
    write_deltalake(uri, data)
    one, other = DeltaTable(uri), DeltaTable(uri)
    assert one.version() == other.version() == 0
    fenced = CommitProperties(app_transactions=[Transaction("app", 1)])
    write_deltalake(one, pa.table({"n": pa.array([10], pa.int64())}), mode="append",
                    commit_properties=fenced)
    with pytest.raises(CommitFailedError):
        write_deltalake(other, pa.table({"n": pa.array([20], pa.int64())}), mode="append",
                        commit_properties=fenced)
    table = DeltaTable(uri)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 10]
    assert table.transaction_version("app") == 1


def test_a_store_that_cannot_start_leaves_nothing(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """weed exiting at once (here: a flag it does not know) is an error naming the log, with
    no state file and no process left."""
    real = store.server_command
    monkeypatch.setattr(store, "server_command",
                        lambda directory, ports: [*real(directory, ports), "-no-such-flag"])
    with pytest.raises(StoreUnavailable, match="exited with code"):
        store.start(tmp_path)
    assert store.status(tmp_path) is None
    assert not (store.home(tmp_path) / "state.json").exists()


def started(argv: list[str], environ: dict[str, str]) -> subprocess.Popen:
    """A child whose exec is complete (its /proc environ readable), as a server's is."""
    child = subprocess.Popen(argv, env=environ)
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{child.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return child


def test_the_demo_puts_every_table_on_the_store(object_store: Any, data_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``./dev demo --storage s3``'s plumbing: the pipeline's tables under
    ``s3://eos/<pipeline>`` through a derived YAML (the shipped one untouched), the store's
    variables in this process's environment for what it starts, and a running Spark Connect
    server without them stopped (its workers write staging: the demo starts one with them)."""
    from eos.compute import connect
    from eos.core.config import PIPELINES_DIR_ENV, load_pipeline
    from eos.tools import demo
    from eos.tools.servers import spark_server
    # The shipped pipelines (the demo points the variable at its derived copy; restored after).
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(SHIPPED_PIPELINES))
    for name in object_store.env:
        monkeypatch.setenv(name, object_store.env[name])
    shipped = load_pipeline("pageviews")
    shipped_text = Path(str(shipped.source_path)).read_text()
    stale = started(["sleep", "60"], {"PATH": os.environ["PATH"]})  # no AWS_*
    stopped: list[bool] = []
    monkeypatch.setattr(connect, "read_state", lambda base=None: {"pid": stale.pid})
    monkeypatch.setattr(spark_server, "stop", lambda base=None: stopped.append(True) or True)
    try:
        config = demo.on_embedded_store(shipped)
    finally:
        stale.kill()
        stale.wait()
    assert config.root == f"s3://{object_store.bucket}/pageviews"
    assert Path(str(config.source_path)).parent == data_dir / "demo-pipelines"
    assert os.environ[PIPELINES_DIR_ENV] == str(data_dir / "demo-pipelines")
    assert Path(str(shipped.source_path)).read_text() == shipped_text
    assert stopped == [True]
    out = capsys.readouterr().out
    assert object_store.env["AWS_SECRET_ACCESS_KEY"] not in out
    # A server that has the store's endpoint and key is left alone.
    fresh = started(["sleep", "60"], {**os.environ})
    monkeypatch.setattr(connect, "read_state", lambda base=None: {"pid": fresh.pid})
    try:
        demo._restart_spark_without(object_store.env)
    finally:
        fresh.kill()
        fresh.wait()
    assert stopped == [True]
