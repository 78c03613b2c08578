"""An audit over a range an operator acknowledged as lost never reads as a plain OK: the
verdict says so and lists every range."""

from __future__ import annotations

from eos.core.loss import LostRange, acknowledged_losses
from eos.tools.audit.report import AuditReport


def test_acknowledged_loss_is_in_the_verdict_and_a_plain_move_is_not_a_loss() -> None:
    lost = LostRange("clicks", 0, 25, 30)
    move = {"position": "acknowledged-loss", "loss": [lost.to_dict()]}
    assert acknowledged_losses(move) == [lost]
    assert acknowledged_losses({"position": "earliest"}) == []
    report = AuditReport("clicks", 4, records=100,
                         acknowledged_lost=[f"before epoch 2: {lost.describe()}"])
    text = report.render()
    assert report.ok
    assert "acknowledged loss before epoch 2: topic 'clicks' partition 0: offsets [25, 30) " \
           "(5 records)" in text
    assert "verdict: OK WITH ACKNOWLEDGED LOSS" in text and "verdict: OK -" not in text
    assert "verdict: OK - every record" in AuditReport("clicks", 4).render()
