"""The bench's fairness rules, as pure functions: the order systems run in
within each repeat, and when a comparison is a verdict at all."""

from __future__ import annotations

import pytest

from bench.cli import rotation
from bench.targets import judge


def test_every_repeat_runs_every_system_once_starting_elsewhere() -> None:
    systems = ["zmesh", "mqtt", "nats"]
    orders = [rotation(systems, i) for i in range(3)]
    assert orders == [["zmesh", "mqtt", "nats"], ["mqtt", "nats", "zmesh"], ["nats", "zmesh", "mqtt"]]
    assert all(sorted(o) == sorted(systems) for o in orders)
    assert rotation([], 5) == []


@pytest.mark.parametrize(
    ("span", "higher_is_better", "verdict"),
    [
        ((2.1, 2.6), True, "met"),  # even the worst repeat clears 2x
        ((1.2, 1.9), True, "missed"),  # even the best repeat falls short
        ((1.8, 2.3), True, "inconclusive"),  # the bound lies inside the spread
        ((0.3, 0.45), False, "met"),  # lower is better (latency): all under 0.5
        ((0.45, 0.58), False, "inconclusive"),
        ((0.6, 0.7), False, "missed"),
    ],
)
def test_a_verdict_inside_the_spread_is_inconclusive(
    span: tuple[float, float], higher_is_better: bool, verdict: str
) -> None:
    bound = 2.0 if higher_is_better else 0.5
    ratio = sum(span) / 2
    assert judge(ratio, span, bound, higher_is_better) == verdict


def test_no_ratio_is_no_verdict() -> None:
    assert judge(None, None, 2.0, True) == "n/a"
