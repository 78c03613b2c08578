"""Apache Kafka as eos runs it (``eos broker start --apache-kafka``) and the broker semantics the
protocol relies on, checked on it: what the embedded mock cluster does not do (test_broker.py
shows the mock's side)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import confluent_kafka as ck
import pytest

from eos.core.errors import BrokerUnavailable, KafkaUnavailable
from eos.core.kafka import broker_state_path, local_broker, topic_watermarks
from eos.core.processes import alive
from eos.tools.pipelines import unique_topic
from eos.tools.servers import apache_kafka
from integration.tools.test_broker import aborted_then_committed

from support.apache_kafka import ApacheKafka

pytestmark = pytest.mark.integration


def _without_broker_env() -> dict[str, str]:
    """This process's environment without the variables that name a broker or credentials."""
    return {k: v for k, v in os.environ.items()
            if not (k.startswith("KAFKA_") or k.startswith("AIRFLOW_CONN_KAFKA"))}


def test_the_pinned_jars_are_listed_with_their_sums_and_fetched_checked() -> None:
    jars = apache_kafka.jars()
    names = {(j.group, j.artifact) for j in jars}
    assert ("org.apache.kafka", "kafka_2.13") in names and len(jars) == len(names)
    assert {j.version for j in jars if j.group == "org.apache.kafka"} == {apache_kafka.VERSION}
    assert all(len(j.sha256) == 64 for j in jars)
    assert apache_kafka.missing() == []  # fetched by ./dev setup, or by the fixture


def test_a_jar_whose_bytes_differ_from_the_pinned_sum_is_refused(tmp_path: Path) -> None:
    """A mirror that serves other bytes: nothing is left that could pass for the jar."""
    source = apache_kafka.cache_dir()
    (jar,) = [j for j in apache_kafka.jars() if j.artifact == "jopt-simple"]
    mirror = tmp_path / "mirror"
    served = mirror / jar.url_path
    served.parent.mkdir(parents=True)
    served.write_bytes((source / jar.file_name).read_bytes() + b"tampered")
    cache = tmp_path / "cache"
    for other in apache_kafka.jars():  # every other jar already there
        if other != jar:
            cache.mkdir(exist_ok=True)
            (cache / other.file_name).symlink_to(source / other.file_name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(apache_kafka.REPOSITORY_ENV, mirror.as_uri())
        with pytest.raises(BrokerUnavailable, match="not the pinned"):
            apache_kafka.fetch(where=cache)
    assert [j.file_name for j in apache_kafka.missing(cache)] == [jar.file_name]
    assert not list(cache.glob(".*part"))


def test_the_cli_runs_apache_kafka_that_local_clients_find_with_its_credentials(
        tmp_path: Path) -> None:
    """``eos broker start --apache-kafka``: SASL/SCRAM on 127.0.0.1, the state file private,
    ``status`` never shows the password, a client with no settings but the data directory finds
    the broker and its credentials, a client without them is refused; ``stop`` leaves no
    process and no data."""
    env = {**_without_broker_env(), "EOS_DATA_DIR": str(tmp_path)}
    eos = [sys.executable, "-m", "eos.tools.cli"]
    started = subprocess.run([*eos, "broker", "start", "--apache-kafka", "--topic", "pv:3"],
                             env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    assert "Apache Kafka 4.1.0 running at 127.0.0.1:" in started.stdout
    state = local_broker(tmp_path)
    assert state is not None and state["kind"] == "apache-kafka"
    try:
        assert stat.S_IMODE(broker_state_path(tmp_path).stat().st_mode) == 0o600
        password = state["client"]["sasl.password"]
        status = subprocess.run([*eos, "broker", "status"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0 and '"reachable": true' in status.stdout
        assert password not in status.stdout and password not in started.stdout
        # Another process with nothing but the data directory: produce, then read back.
        script = ("from eos.core.kafka import client_settings, topic_watermarks\n"
                  "import confluent_kafka as ck, json\n"
                  "s = client_settings()\n"
                  "p = ck.Producer(s); p.produce('pv', b'x', partition=2); p.flush(30)\n"
                  "print(json.dumps({'partitions': len(topic_watermarks(s, 'pv')),\n"
                  "                  'high': topic_watermarks(s, 'pv')[2][1],\n"
                  "                  'protocol': str(s['security.protocol'])}))\n")
        found = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                               text=True, timeout=120)
        assert found.returncode == 0, found.stderr[-3000:]
        assert json.loads(found.stdout) == {"partitions": 3, "high": 1,
                                            "protocol": "SASL_PLAINTEXT"}
        for refused in ({"bootstrap.servers": state["bootstrap"]},
                        {"bootstrap.servers": state["bootstrap"], **state["client"],
                         "sasl.password": "wrong"}):
            with pytest.raises(KafkaUnavailable):
                topic_watermarks({**refused, "socket.timeout.ms": 3000,
                                  "socket.connection.setup.timeout.ms": 3000}, "pv")
    finally:
        stopped = subprocess.run([*eos, "broker", "stop"], env=env, capture_output=True,
                                 text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert not alive(state["pid"]) or _is_zombie(state["pid"])
    assert not broker_state_path(tmp_path).exists() and not Path(state["home"]).exists()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_every_listener_binds_to_loopback_and_authenticates(
        apache_kafka: ApacheKafka) -> None:
    properties = (apache_kafka.home / "server.properties").read_text()
    listeners = next(line for line in properties.splitlines()
                     if line.startswith("listeners="))
    assert listeners.count("://127.0.0.1:") == 3
    assert "PLAINTEXT:" not in properties.replace("SASL_PLAINTEXT", "")
    assert stat.S_IMODE((apache_kafka.home / "server.properties").stat().st_mode) == 0o600


def test_read_committed_hides_aborted_transactions(apache_kafka: ApacheKafka) -> None:
    topic = unique_topic()
    assert aborted_then_committed(apache_kafka.settings, topic) == [b"v0"] + [
        b"committed-%d" % i for i in range(5)]


def test_a_second_producer_of_one_transactional_id_fences_the_first(
        apache_kafka: ApacheKafka) -> None:
    """What the mock does not do (test_broker.py): the zombie's commit fails, its records are
    never visible to ``read_committed``."""
    topic = unique_topic()
    settings = apache_kafka.settings
    first = ck.Producer({**settings, "transactional.id": f"fence-{topic}"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    assert first.flush(30) == 0
    second = ck.Producer({**settings, "transactional.id": f"fence-{topic}"})
    second.init_transactions(30)  # aborts the first's transaction
    with pytest.raises(ck.KafkaException) as fenced:
        first.commit_transaction(30)
    assert fenced.value.args[0].fatal()
    second.begin_transaction()
    second.produce(topic, value=b"winner", partition=0)
    second.commit_transaction(30)
    high = topic_watermarks(settings, topic)[0][1]
    from eos.tools.audit.verify import read_range

    assert [r.value for r in read_range(settings, topic, 0, 0, high)] == [b"winner"]


def test_the_mock_is_told_apart_from_apache_kafka_without_its_state_file(
        kafka: str, apache_kafka: ApacheKafka, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that cannot see the state file (another data directory, a worker on another
    machine) asks the cluster its id: the mock's admin requests it would otherwise wait on
    (DescribeTopics, CreateTopics, DescribeConfigs) are never sent to it."""
    from eos.core.kafka import is_embedded_broker

    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path / "elsewhere"))
    assert is_embedded_broker({"bootstrap.servers": kafka})
    assert not is_embedded_broker(apache_kafka.settings)


def test_a_cluster_id_starting_with_a_dash_formats(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One random cluster id in 64 starts with ``-``: the storage tool took it for an option
    and the start failed ("argument --cluster-id/-t: expected one argument")."""
    monkeypatch.setattr(apache_kafka, "_cluster_id", lambda: "-AbCdEfGhIjKlMnOpQrStU")
    layout, _ = apache_kafka.prepare(tmp_path / "home", "eos")
    meta = next(Path(layout.home).rglob("meta.properties")).read_text()
    assert "cluster.id=-AbCdEfGhIjKlMnOpQrStU" in meta
