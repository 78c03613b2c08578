"""The commands the demo prints at its end work where they are shown: with the data directory
it ran with (``./dev`` sets one), ``eos broker stop`` in another shell finds the broker."""

from __future__ import annotations

import pytest

from eos.tools.demo import here


def test_a_printed_command_carries_the_data_directory_it_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_DATA_DIR", "/srv/eos data")
    assert here("eos broker stop") == "EOS_DATA_DIR='/srv/eos data' eos broker stop"
    monkeypatch.delenv("EOS_DATA_DIR")
    assert here("eos broker stop") == "eos broker stop"
