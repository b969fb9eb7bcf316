"""The bench's cost tool keeps working on this tree (its figures are quoted in docs/reliability.md)."""

from __future__ import annotations

import pytest

from bench.send_cost import both_sides, main, requests, sender_only

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("measure", [sender_only, both_sides, requests])
async def test_each_cost_mode_measures_a_few_messages(measure) -> None:  # type: ignore[no-untyped-def]
    cost = await measure(200)
    assert 0 < cost < 0.05  # seconds of CPU per message: measured, and not absurd


def test_a_bad_command_line_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["both"]) == 2
    assert main(["fast", "10"]) == 2
    assert "send_cost.py" in capsys.readouterr().err
