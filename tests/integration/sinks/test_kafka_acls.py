"""On Apache Kafka with ACLs: a Kafka sink whose principal may not use its transactional id is
refused at ``begin`` (its producer fences the id's earlier ones there), one that may not write
its output topic before the seal (``SinkCannotTake``), with nothing sealed or written, so the
epoch goes on once the grant is made."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from eos.compute.epochs import run_until_caught_up
from eos.compute.precommit.stager import SparkStager
from eos.core.errors import SinkCannotTake, SinkRejected
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.protocol.sealing import sealed_already
from eos.core.sink import sinks_for
from eos.core.tables import ensure_tables
from eos.tools.audit.verify import audit
from eos.tools.pipelines import unique_topic
from integration.sinks.test_kafka_sink import SPEC, read_committed

from support.apache_kafka import ApacheKafka, kafka_section
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def add_user(kafka: ApacheKafka, name: str | None = None, password: str | None = None
             ) -> tuple[str, str]:
    """A new SCRAM user with no rights at all."""
    name = name or f"limited-{secrets.token_hex(4)}"
    password = password or secrets.token_urlsafe(16)
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode())
    admin = kafka.admin()  # kept until the result: its handle serves it
    admin.alter_user_scram_credentials([upsert])[name].result(30)
    return name, password


def grant(kafka: ApacheKafka, user: str, kind: ResourceType, name: str,
          *operations: AclOperation) -> None:
    bindings = [AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                           AclPermissionType.ALLOW) for op in operations]
    admin = kafka.admin()
    for future in admin.create_acls(bindings).values():
        future.result(30)


def test_a_principal_without_write_or_its_transactional_id_is_refused_before_the_seal(
        tmp_path: Path, apache_kafka: ApacheKafka, spark: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    user, password = add_user(apache_kafka)
    monkeypatch.setenv("LIMITED_KAFKA_USER", user)
    monkeypatch.setenv("LIMITED_KAFKA_PASSWORD", password)
    out = unique_topic("out")
    limited = {"sasl.username": "${LIMITED_KAFKA_USER}",
               "sasl.password": "${LIMITED_KAFKA_PASSWORD}"}
    config = make_pipeline(tmp_path, kafka=kafka_section(), records=SPEC,
                           epoch={"max_records": 800, "staging_retention": 1},
                           sinks={"windows": [{"kafka": {"topic": out, "client": limited}},
                                              {"delta": "target"}],
                                  "late": [{"delta": "late"}],
                                  "quarantine": [{"delta": "quarantine"}]})
    (sink,) = [s for s in sinks_for(config) if s.kind == "kafka"]
    # The operator's part: the topics exist, the marker topic compacted; the user may only
    # describe the output topic, and read and write its marker topic.
    admin = apache_kafka.admin()
    for future in admin.create_topics([
            NewTopic(out, 4, 1),
            NewTopic(sink.marker_topic, 1, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(30)
    grant(apache_kafka, user, ResourceType.TOPIC, out, AclOperation.DESCRIBE)
    grant(apache_kafka, user, ResourceType.TOPIC, sink.marker_topic, AclOperation.DESCRIBE,
          AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE_CONFIGS)

    # The KAFKA_SASL_* variables would win over the sink's own client settings (the CLI's
    # precedence): this pipeline's clients take theirs from its config alone.
    monkeypatch.delenv("KAFKA_SASL_USERNAME")
    monkeypatch.delenv("KAFKA_SASL_PASSWORD")
    with pytest.raises(SinkRejected, match=rf"refuses transactional id "
                                           rf"'{sink.transactional_id}'.*grant it WRITE"):
        begin(config, run_id="acl")  # the sink fences its id's earlier producers at begin
    grant(apache_kafka, user, ResourceType.TRANSACTIONAL_ID, sink.transactional_id,
          AclOperation.WRITE, AclOperation.DESCRIBE)
    plan = begin(config, run_id="acl")
    precommit(config, plan.epoch, SparkStager(spark))
    with pytest.raises(SinkCannotTake, match=rf"lacks WRITE on topic '{out}'.*nothing was "
                                             "sealed"):
        commit(config, plan.epoch)
    with ensure_tables(config) as tables:
        assert not sealed_already(config, tables, plan.epoch)
    with monkeypatch.context() as as_admin:
        for name, value in apache_kafka.env.items():
            as_admin.setenv(name, value)
        assert read_committed(out, "read_uncommitted") == []

    grant(apache_kafka, user, ResourceType.TOPIC, out, AclOperation.WRITE)
    assert commit(config, plan.epoch).outcome is Outcome.COMMITTED
    run_until_caught_up(config, "acl-granted", spark=spark)
    grant(apache_kafka, user, ResourceType.TOPIC, out, AclOperation.READ)  # the audit reads
    report = audit(config)
    assert report.ok, report.render()
    assert checkpointed_epoch(config) >= 1
    with monkeypatch.context() as as_admin:
        for name, value in apache_kafka.env.items():
            as_admin.setenv(name, value)
        assert len(read_committed(out)) > 0
