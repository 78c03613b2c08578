"""Spark Connect as the compute (``compute.mode: connect``): the supervised server, the session a
precommit opens, both compute modes running the same precommit, and what happens when the server
is down, refuses the token, restarts mid-epoch, or a client dies mid-read (a zombie on a shared
server). Every recovery ends with the independent audit: nothing lost, nothing doubled.

The restart and expiry tests use a second server of their own (``own_server``) so the shared one
keeps serving the rest of the suite.
"""

from __future__ import annotations

import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eos.compute import connect
from eos.compute.precommit.stager import SparkStager
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.errors import EXIT_TRANSIENT, ComputeUnavailable
from eos.core.layout import tables_for
from eos.core.processes import group_members
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.staging import staged_epoch
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import write_pipeline
from eos.tools.servers import spark_server as supervisor

from support.harness import eos_cli, finish_and_audit, free_port, table_versions
from support.pipelines import make_pipeline

REPO = Path(__file__).resolve().parents[3]  # the project: its spark_apps/

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = GeneratorSpec(events=3000, keys=20, interval_ms=25, disorder_ms=800, late_fraction=0.02,
                     late_delay_ms=20_000, bad_fraction=0.02, seed=11)
BARRIER = "precommit.mid_read:wait"  # holds a Spark read task after its first batch


def loaded_pipeline(directory: Path, **overrides: Any) -> PipelineConfig:
    return make_pipeline(directory, max_records=1500, staging_retention=2, records=SPEC,
                         kafka={"topic": f"c-{directory.name[-12:]}", "read_timeout": "30s",
                                "split_records": 500}, **overrides)


def audited(config: PipelineConfig, spark: Any, tag: str) -> None:
    finish_and_audit(config, spark, tag, SPEC.events)


def remote_url(endpoint: connect.Endpoint) -> str:
    token = f";token={endpoint.token}" if endpoint.token else ""
    return f"{endpoint.address}/{token}"


def wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} first: {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s}s"
        time.sleep(0.1)


def held_barrier(config: PipelineConfig, faults_dir: Path, env: dict[str, str],
                 timeout_s: int) -> subprocess.Popen:
    """``eos precommit --epoch 0`` whose Spark read holds at a barrier nobody else reaches
    for ``timeout_s``; returns once the read is in progress (the barrier was reached)."""
    proc = eos_cli(config, "precommit", "--epoch", "0", faults=BARRIER, faults_dir=faults_dir,
                   env={"EOS_BARRIER_TIMEOUT_S": str(timeout_s), **env}, wait=False)
    wait_for_file(faults_dir / "precommit.mid_read.arrivals", proc)
    return proc


# -- the server ------------------------------------------------------------------------------------

def outbound_ip() -> str | None:
    """This machine's non-loopback address, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") else ip


def test_server_binds_loopback_keeps_its_token_secret_and_reports_health(
        spark_server: dict, data_dir: Path) -> None:
    token = connect.read_token(data_dir)
    token_file = connect.token_path(data_dir)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert len(token) >= 32
    pid = spark_server["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    assert token not in argv, "the token must not be on the server's command line (ps shows it)"
    assert "spark.connect.grpc.binding.address=127.0.0.1" in argv.replace("\0", " ")
    assert token not in connect.state_path(data_dir).read_text()
    assert token not in supervisor.log_path(data_dir).read_text(errors="replace")
    ip = outbound_ip()
    if ip is not None:
        with pytest.raises(OSError):
            socket.create_connection((ip, spark_server["port"]), timeout=2).close()

    shown = subprocess.run([sys.executable, "-m", "eos.tools.cli", "spark", "status"],
                           capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert '"healthy": true' in shown.stdout
    assert token not in shown.stdout + shown.stderr

    config = write_pipeline(data_dir)
    anonymous = connect.Endpoint("127.0.0.1", spark_server["port"], None, False, "test")
    with pytest.raises(ComputeUnavailable, match="No authentication token provided"), \
            connect.session(config, anonymous):
        pass


# -- both modes run the same precommit -------------------------------------------------------------

def test_connect_and_submit_stage_and_commit_the_same_result(tmp_path: Path, kafka: str,
                                                              spark_server: dict) -> None:
    """The same topic through ``eos run`` on each compute mode: identical windows, both audited.
    spark-submit runs the project's ``spark_apps/eos_precommit.py``, as the compose stack does
    (``EOS_SPARK_APP``); a variable naming no file fails before anything is submitted."""
    connected = loaded_pipeline(tmp_path / "connect", compute={"mode": "connect"})
    (tmp_path / "submit").mkdir()
    submitted = write_pipeline(tmp_path / "submit", kafka=connected.kafka.model_dump(),
                               epoch={"max_records": 1500, "staging_retention": 2},
                               compute={"mode": "submit"})
    missing = eos_cli(submitted, "run", "--epochs", "1",
                      env={"EOS_SPARK_APP": str(tmp_path / "nowhere.py")})
    assert missing.returncode != 0 and "EOS_SPARK_APP" in missing.stderr, missing.stderr[-2000:]
    app = {"EOS_SPARK_APP": str(REPO / "spark_apps" / "eos_precommit.py")}
    for config, env in ((connected, {}), (submitted, app)):
        ran = eos_cli(config, "run", "--epochs", "2", env=env)
        assert ran.returncode == 0, ran.stderr[-3000:]
        report = audit(config)
        assert report.ok, report.render()
        assert report.records == SPEC.events
    target = {name: read_table(str(Path(c.root) / "target")).drop_columns(["epoch"])
              .sort_by([("key", "ascending"), ("window_start", "ascending")])
              for name, c in (("connect", connected), ("submit", submitted))}
    assert target["connect"].equals(target["submit"])


# -- the server down, a wrong token ----------------------------------------------------------------

@pytest.mark.parametrize("fault", ["server down", "wrong token"])
def test_unusable_server_fails_clearly_stages_nothing_and_the_retry_commits_once(
        tmp_path: Path, kafka: str, spark: Any, spark_server: dict, data_dir: Path,
        fault: str) -> None:
    config = loaded_pipeline(tmp_path)
    plan = begin(config, run_id="r0")
    token = connect.read_token(data_dir)
    if fault == "server down":
        bad = connect.Endpoint("127.0.0.1", free_port(), token, False, "test")
        expected = f"sc://127.0.0.1:{bad.port}.*not reachable.*eos spark start"
    else:
        bad = connect.Endpoint("127.0.0.1", spark_server["port"], "not-the-token", False, "test")
        expected = r"refused the token \(Invalid authentication token\)"
    failed = eos_cli(config, "precommit", "--epoch", "0", env={connect.REMOTE_ENV:
                                                               remote_url(bad)})
    assert failed.returncode == EXIT_TRANSIENT, failed.stderr[-2000:]
    assert failed.stderr.startswith("eos: error: ComputeUnavailable"), failed.stderr[-2000:]
    assert re.search(expected, failed.stderr), failed.stderr
    assert token not in failed.stdout + failed.stderr
    assert "not-the-token" not in failed.stdout + failed.stderr
    assert staged_epoch(tables_for(config), 0, plan.hash) is None
    # The retry (Airflow's, or an operator's rerun) on a working server commits epoch 0 once.
    retried = eos_cli(config, "precommit", "--epoch", "0")
    assert retried.returncode == 0, retried.stderr[-2000:]
    assert "outcome=staged" in retried.stdout
    assert commit(config, 0).epoch == 0
    audited(config, spark, "after-" + fault.replace(" ", "-"))


# -- a zombie on the shared server -----------------------------------------------------------------

def test_client_killed_mid_read_leaves_a_zombie_that_cannot_stage(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    """The client dies while the server reads epoch 0 for it; the server-side execution goes on
    (held at a barrier, then released) but only the client writes staging, so the rerun's rows
    are the only ones staged and the committed result is exact."""
    config = loaded_pipeline(tmp_path)
    plan = begin(config, run_id="r0")
    client = held_barrier(config, tmp_path / "faults", {}, timeout_s=15)
    client.send_signal(signal.SIGKILL)
    client.wait()
    before = table_versions(config)["staging"]
    rerun = precommit(config, 0, SparkStager(spark))  # the retry, while the zombie is still held
    assert rerun.plan_hash == plan.hash
    assert table_versions(config)["staging"] == before + 1  # the rerun's one staging commit
    assert commit(config, 0).epoch == 0
    staged_by_rerun = table_versions(config)["staging"]  # and the commit's seal
    time.sleep(20)  # the zombie's barrier times out; its execution finishes or is abandoned
    assert table_versions(config)["staging"] == staged_by_rerun, "the zombie staged something"
    audited(config, spark, "after-zombie")


# -- a server of its own: restart mid-epoch, abandoned sessions expire -----------------------------

@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory, kafka: str) -> Iterator[
        tuple[Path, int]]:
    base = tmp_path_factory.mktemp("own-spark")
    port = free_port()
    supervisor.start(base=base, port=port, session_timeout="15s", driver_memory="1g",
                  conf={"spark.connect.session.manager.maintenanceInterval": "2s"})
    yield base, port
    assert supervisor.stop(base) or connect.read_state(base) is None


def own_endpoint(own_server: tuple[Path, int]) -> connect.Endpoint:
    base, port = own_server
    return connect.Endpoint("127.0.0.1", port, connect.read_token(base), False, "own server")


def test_server_restart_mid_epoch_fails_the_attempt_and_the_retry_commits_once(
        tmp_path: Path, kafka: str, spark: Any, own_server: tuple[Path, int]) -> None:
    config = loaded_pipeline(tmp_path)
    plan = begin(config, run_id="r0")
    env = {connect.REMOTE_ENV: remote_url(own_endpoint(own_server))}
    client = held_barrier(config, tmp_path / "faults", env, timeout_s=120)
    base, port = own_server
    assert supervisor.stop(base)
    supervisor.start(base=base, port=port, session_timeout="15s", driver_memory="1g",
                  conf={"spark.connect.session.manager.maintenanceInterval": "2s"})
    _, err = client.communicate(timeout=300)
    assert client.returncode == EXIT_TRANSIENT, err[-3000:]
    assert err.startswith("eos: error: ComputeUnavailable"), err[-3000:]
    assert f"sc://127.0.0.1:{port}" in err
    assert staged_epoch(tables_for(config), 0, plan.hash) is None
    retried = eos_cli(config, "precommit", "--epoch", "0", env=env)
    assert retried.returncode == 0, retried.stderr[-2000:]
    assert commit(config, 0).epoch == 0
    assert checkpointed_epoch(config) == 0
    audited(config, spark, "after-restart")


def test_abandoned_sessions_expire(tmp_path: Path, own_server: tuple[Path, int]) -> None:
    """A client that dies without releasing its session: the server closes the session after
    its idle timeout, so a long-lived server does not accumulate them."""
    endpoint = own_endpoint(own_server)
    session_id = "6d1f9a53-2b8e-4c1e-9d55-0c4b7f1f0a11"
    opener = subprocess.run(
        [sys.executable, "-c",
         "import os, sys; from pyspark.sql import SparkSession; "
         "s = SparkSession.builder.remote(sys.argv[1]).create(); s.range(3).count(); "
         "os._exit(0)",  # dies without stop(): the session is abandoned, not released
         endpoint.url(session_id)],
        capture_output=True, text=True, check=False, timeout=120)
    assert opener.returncode == 0, opener.stderr[-2000:]
    time.sleep(25)  # timeout 15s, maintenance every 2s
    from pyspark.sql import SparkSession

    with pytest.raises(Exception, match="SESSION_CLOSED"):
        again = SparkSession.builder.remote(endpoint.url(session_id)).create()
        try:
            again.range(1).count()
        finally:
            again.release_session_on_close = False
            again.stop()


def test_a_pipeline_session_the_server_closed_is_stepped_over(
        tmp_path: Path, own_server: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect: a pipeline's session had one fixed id; once the server closed it (idle past
    its session timeout, 15 min on ``eos spark start``'s server), the server refused that id
    for good and every later precommit failed, retried forever. Now a closed id is stepped
    over to the pipeline's next one. Closed here by releasing it (the server keeps a released
    session's id as closed, as an expired one's: ``test_abandoned_sessions_expire``)."""
    from pyspark.sql import SparkSession

    monkeypatch.setattr(connect, "SESSION_ROTATION_MS", 10**15)  # one "hour" for the test
    config = loaded_pipeline(tmp_path)
    assert config.compute.session == "pipeline"
    endpoint = own_endpoint(own_server)
    first = connect.pipeline_session_id(config, 0)
    closing = SparkSession.builder.remote(endpoint.url(first)).create()
    assert closing.range(2).count() == 2
    closing.release_session_on_close = True
    connect.stop_session(closing)  # released: the server now refuses ``first``
    with pytest.raises(Exception, match="SESSION_CLOSED") as refused:
        connect._opened(config, endpoint, first)  # what a fixed id met on every precommit
    assert connect.session_closed(refused.value)
    for _ in range(2):  # the next precommit, and the one after, join generation 1
        with connect.session(config, endpoint) as spark:
            assert spark.range(3).count() == 3
            assert spark.session_id == connect.pipeline_session_id(config, 1)


def test_stop_leaves_no_process(tmp_path: Path, kafka: str) -> None:
    """``eos spark stop``: the JVM and every Python worker it forked are gone."""
    base = tmp_path / "data"
    state = supervisor.start(base=base, port=free_port(), driver_memory="1g")
    endpoint = connect.Endpoint("127.0.0.1", state["port"], connect.read_token(base), False, "t")
    config = write_pipeline(tmp_path)
    with connect.session(config, endpoint) as spark:  # start Python workers on the server
        assert spark.range(4).mapInArrow(lambda it: it, "id long").count() == 4
    pgid = state["pid"]
    assert supervisor.stop(base)
    assert connect.read_state(base) is None
    survivors = group_members(pgid)
    assert not survivors, f"processes of the server's group survived: {survivors}"
    assert not supervisor.stop(base)


@pytest.mark.parametrize("message", [
    # What a server being stopped answered mid-precommit in CI on 2026-11-21 (the restart
    # test stopped it): its SparkContext was torn down under the running job.
    '(java.lang.NullPointerException) Cannot invoke "org.apache.spark.rpc.RpcEndpointRef.askSync'
    '(Object, scala.reflect.ClassTag)" because the return value of "org.apache.spark.storage.'
    'BlockManagerMaster.driverEndpoint()" is null',
    "(org.apache.spark.SparkException) Job 3 cancelled because SparkContext was shut down",
])
def test_a_server_stopping_under_a_job_is_compute_unavailable(message: str) -> None:
    """The restart test's race, pinned: whichever way the stopping server answers, the attempt
    fails as ComputeUnavailable (transient, nothing staged), not as a failed Spark job."""
    from pyspark.errors.exceptions.connect import UnknownException

    endpoint = connect.Endpoint("127.0.0.1", 15002, "token", False, "test")
    error = connect.compute_error(UnknownException(message=message), endpoint)
    assert isinstance(error, ComputeUnavailable)
    assert connect.compute_error(UnknownException(message="(java.lang.ArithmeticException) / by "
                                                          "zero"), endpoint) is None


def test_a_stopped_session_leaves_its_finalizer_nothing_that_can_deadlock() -> None:
    """pyspark's ``SparkSession.__del__`` closes the client again, which shuts down the release
    pool every session shares, waiting on the pool's lock. Run by the garbage collector inside
    that pool's ``submit`` (which holds the lock), it hung the process; after ``stop_session``
    it has nothing to close. No server is needed: a session connects on its first call."""
    import threading

    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{free_port()}").create()
    spark.release_session_on_close = False  # nothing to release on a server never called
    connect.stop_session(spark)
    pool = ExecutePlanResponseReattachableIterator._get_or_create_release_thread_pool()
    finished = threading.Event()

    def finalize_inside_submit() -> None:  # where the collector ran it when the tests hung
        with pool._shutdown_lock:
            spark.__del__()
        finished.set()

    threading.Thread(target=finalize_inside_submit, daemon=True).start()
    assert finished.wait(10), "the finalizer deadlocked on the release pool's lock"
