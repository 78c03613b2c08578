"""``python -m bench.storage``: tables on S3 vs on local disk, side by side in one run.

Two pipelines read the same topic, one with every table on local disk, one with every table on
an S3 store (the embedded SeaweedFS gateway, ``eos.tools.servers.object_store``, unless ``AWS_*``
already name one), through the same epoch loop and Spark session. Per phase it reports the
median wall time of epochs of ``--records`` records and of empty epochs (the protocol's fixed
cost), and on S3 the HTTP requests each phase makes (``begin``, ``precommit`` including the
executors' staging writes and reads, ``commit``), counted by a forwarding proxy between every
client and the store: the round trips that cost on a remote store.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from bench.env import Env, environment
from eos.compute.epochs import run_epoch
from eos.core.processes import restored_environ
from eos.tools.generator import GeneratorSpec
from eos.tools.produce import produce

_REQUEST = re.compile(rb"(?:^|\r\n)(GET|PUT|HEAD|POST|DELETE) (/\S*)")


METHODS = ("GET", "PUT", "HEAD", "POST", "DELETE")


def _serve(port: int, target: tuple[str, int], counts: Any, trail: str | None) -> None:
    """The proxy's process: forward every connection to ``target``, counting requests (and,
    with ``trail``, appending each one's method and target to that file)."""
    server = socket.create_server(("127.0.0.1", port), backlog=256)
    written = threading.Lock()

    def pump(source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while data := source.recv(65536):
                if count:
                    for method, path in _REQUEST.findall(data):
                        with counts.get_lock():
                            counts[METHODS.index(method.decode())] += 1
                        if trail:
                            with written, open(trail, "ab") as out:
                                out.write(method + b" " + path + b"\n")
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(target)
        threading.Thread(target=pump, args=(client, upstream, True), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()


class CountingProxy:
    """A TCP forwarder on 127.0.0.1 that counts HTTP requests by method, in a process of its
    own (delta-rs may hold this process's GIL while it waits for an answer: a forwarder thread
    here would then never run). The bytes pass unchanged (the ``Host`` a client signed is what
    the store sees), so SigV4 holds."""

    def __init__(self, target: str, trail: str | None = None) -> None:
        import multiprocessing

        found = urlsplit(target)
        context = multiprocessing.get_context("spawn")
        self.counts = context.Array("q", len(METHODS))
        self.trail = trail
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._process = context.Process(
            target=_serve, args=(port, (found.hostname or "127.0.0.1", found.port or 80),
                                 self.counts, trail), daemon=True)
        self._process.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return
            time.sleep(0.1)
        raise RuntimeError("the counting proxy did not start")

    def trail_end(self) -> int:
        """The trail's length in bytes now (0 without one)."""
        return os.path.getsize(self.trail) if self.trail and os.path.exists(self.trail) else 0

    def requests_since(self, offset: int) -> tuple[list[str], int]:
        """The requests the trail holds after byte ``offset``, and its end."""
        if not self.trail or not os.path.exists(self.trail):
            return [], offset
        with open(self.trail, "rb") as trail:
            trail.seek(offset)
            data = trail.read()
        return data.decode(errors="replace").splitlines(), offset + len(data)

    def snapshot(self) -> Counter[str]:
        with self.counts.get_lock():
            return Counter(dict(zip(METHODS, self.counts[:], strict=True)))

    def close(self) -> None:
        self._process.terminate()
        self._process.join(5)


_LOG_FILE = re.compile(r"_delta_log/(\d+)\.(json|checkpoint\.parquet)$")


def request_kind(line: str) -> str:
    """What one request to the store was, by table and object: ``GET staging commit``,
    ``LIST epochs _delta_log``, ``PUT target data``... (the table: the directory that holds
    its ``_delta_log``, else the one above a data file's partition directories)."""
    method, _, target = line.partition(" ")
    parts = urlsplit(target)
    query = dict(p.partition("=")[::2] for p in parts.query.split("&") if p)
    key = query.get("prefix", "") if "list-type" in query else parts.path
    key = unquote(key).strip("/")
    if "list-type" in query:
        method = "LIST"
    segments = key.split("/")
    if "_delta_log" in segments:
        at = segments.index("_delta_log")
        table = segments[at - 1] if at else "?"
        rest = "/".join(segments[at:])
        found = _LOG_FILE.search(rest)
        what = ("_delta_log" if not found else "commit" if found.group(2) == "json"
                else "checkpoint")
        if rest.endswith("_last_checkpoint"):
            what = "_last_checkpoint"
    else:
        staged = [i for i, s in enumerate(segments) if s.startswith("epoch=")]
        named = [s for s in segments[1:] if s and "=" not in s and not s.endswith(".parquet")]
        table = (segments[staged[0] - 1] if staged and staged[0] else
                 named[-1] if named else "?")
        what = "data" if key.endswith(".parquet") else "object"
    return f"{method} {table} {what}"


@dataclass
class Phases:
    """Per phase: wall seconds of each epoch, and (on S3) requests of each epoch, with their
    kinds (``request_kind``) when the proxy keeps a trail."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    requests: dict[str, list[int]] = field(default_factory=dict)
    kinds: dict[str, Counter[str]] = field(default_factory=dict)


def _epochs(env: Env, config: Any, n: int, tag: str, proxy: CountingProxy | None) -> Phases:
    out = Phases()

    @contextlib.contextmanager
    def in_phase(name: str) -> Iterator[None]:
        before = proxy.snapshot() if proxy else Counter()
        offset = proxy.trail_end() if proxy else 0
        yield
        if proxy:
            made = proxy.snapshot() - before
            out.requests.setdefault(name, []).append(sum(made.values()))
            lines, _ = proxy.requests_since(offset)
            out.kinds.setdefault(name, Counter()).update(request_kind(x) for x in lines)

    for i in range(n):
        run = run_epoch(config, f"{tag}-{i}", spark=env.spark, in_phase=in_phase)
        for name, seconds in run.phases.items():
            out.seconds.setdefault(name, []).append(seconds)
    return out


def measure(env: Env, base: str, proxy: CountingProxy | None, records: int, epochs: int,
            empty: int) -> dict[str, dict[str, Phases]]:
    """Both pipelines, alternating epoch by epoch so both see the same machine."""
    topic = f"bench-storage-{uuid.uuid4().hex[:6]}"
    pipelines = {
        "local": env.config("storage-local", topic, max_records=records),
        "s3": env.config("storage-s3", topic, max_records=records,
                         tables={"root": f"{base}/storage-s3-{uuid.uuid4().hex[:6]}"}),
    }
    spec = GeneratorSpec(events=records * (epochs + 1), keys=200, interval_ms=5, seed=3)
    produce(spec, topic, env.settings(), progress=False)
    figures: dict[str, dict[str, Phases]] = {k: {} for k in pipelines}
    for config in pipelines.values():  # the first epoch of each (tables created) untimed
        _epochs(env, config, 1, "warm", None)
    for kind, config in pipelines.items():
        figures[kind]["full"] = _epochs(env, config, epochs, "full",
                                        proxy if kind == "s3" else None)
    for kind, config in pipelines.items():
        _epochs(env, config, 1, "drain", None)  # reads what is left
        figures[kind]["empty"] = _epochs(env, config, empty, "empty",
                                         proxy if kind == "s3" else None)
    return figures


def render(figures: dict[str, dict[str, Phases]], records: int) -> str:
    lines = ["| epochs | phase | local (ms) | S3 (ms) | S3 / local | S3 requests per epoch |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for shape, label in (("full", f"{records:,} records"), ("empty", "empty")):
        local, s3 = figures["local"][shape], figures["s3"][shape]
        for phase in ("begin", "precommit", "commit"):
            a = statistics.median(local.seconds[phase]) * 1000
            b = statistics.median(s3.seconds[phase]) * 1000
            made = s3.requests.get(phase)
            lines.append(f"| {label} | {phase} | {a:.0f} | {b:.0f} | {b / a:.2f}x | "
                         f"{statistics.median(made) if made else '-':g} |")
        a = sum(statistics.median(v) for v in local.seconds.values()) * 1000
        b = sum(statistics.median(v) for v in s3.seconds.values()) * 1000
        lines.append(f"| {label} | **epoch** | {a:.0f} | {b:.0f} | {b / a:.2f}x | "
                     f"{sum(statistics.median(v) for v in s3.requests.values()):g} |")
    return "\n".join(lines)


def render_kinds(figures: dict[str, dict[str, Phases]], top: int = 12) -> str:
    """Per epoch shape and phase, the most frequent kinds of S3 request, per epoch."""
    lines = ["| epochs | phase | request | per epoch |", "| --- | --- | --- | ---: |"]
    for shape in ("full", "empty"):
        phases = figures["s3"][shape]
        epochs = max(len(v) for v in phases.requests.values()) if phases.requests else 1
        for phase, kinds in phases.kinds.items():
            for kind, n in kinds.most_common(top):
                lines.append(f"| {shape} | {phase} | {kind} | {n / epochs:.1f} |")
    return "\n".join(lines)


@contextlib.contextmanager
def store() -> Iterator[str]:
    """The S3 store's endpoint: the ``AWS_*`` environment's, else the embedded one started
    here (and stopped at the end)."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        yield os.environ.get("EOS_BENCH_BUCKET", "eos")
        return
    from eos.tools.servers import object_store
    started = object_store.status() is None
    state = object_store.start()
    try:
        with restored_environ(object_store.env()):
            os.environ.update(object_store.env())
            yield state["bucket"]
    finally:
        if started:
            object_store.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storage",
                                description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=50_000, help="records per epoch")
    p.add_argument("--epochs", type=int, default=5, help="timed epochs of --records each")
    p.add_argument("--empty", type=int, default=5, help="timed empty epochs")
    p.add_argument("--requests", action="store_true",
                   help="also list each phase's S3 requests by table and kind")
    args = p.parse_args(argv)
    trail = None
    if args.requests:
        import tempfile

        trail = os.path.join(tempfile.mkdtemp(prefix="eos-bench-s3-"), "requests.log")
    with store() as bucket:
        # Every client (this process, the Spark workers it starts) talks to the store through
        # the counting proxy: set before the session (and its workers) exist.
        proxy = CountingProxy(os.environ["AWS_ENDPOINT_URL"], trail)
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        with environment() as env:
            figures = measure(env, f"s3://{bucket}/bench-{uuid.uuid4().hex[:6]}", proxy,
                              args.records, args.epochs, args.empty)
        proxy.close()
    print("\n" + render(figures, args.records))
    if args.requests:
        print("\n" + render_kinds(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
