"""One measurement of ``python -m bench.ab``, run against one tree's zmesh.

    PYTHONPATH=<bench copy>:<tree> python -m bench.ab_measure WORKLOAD N [SCALE]

``bench.ab`` starts this in a fresh process per measurement, with the
interpreter under test, a copy of this checkout's ``bench`` package first
on ``PYTHONPATH`` and the tree measured second (so ``zmesh`` comes from the
tree, the bench from this checkout, whatever the tree's own ``bench/`` is).
It runs WORKLOAD once with count N and prints one line,
``AB_RESULT {"value": ..., "zmesh": <where zmesh was imported from>, "notes": [...]}``;
on failure ``AB_ERROR <text>`` and exit status 1. With ``ZMESH_AB_TREE`` set,
a zmesh imported from anywhere else is an error: the number would belong to
another tree.

The workloads are the ``python -m bench`` zmesh roles (bench/systems/zmesh_mesh.py:
two or more node processes over ZeroMQ on 127.0.0.1, the ~200-byte envelope)
and, for the in-process CPU costs, bench/send_cost.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RUNS", "main", "run"]


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the harness: every peer is stopped


def _sizes(scale: float) -> Any:
    from .systems.base import Sizes

    return Sizes(
        throughput_n=0, rtt_n=0, fanout_n=0, subscribers=4,
        warmup=max(200, int(2000 * scale)), rtt_warmup=max(50, int(300 * scale)), timeout=300.0,
    )  # fmt: skip


def _system(key: str, scale: float, **overrides: Any) -> Any:
    """The bench system *key*, its class vars (``qos``, ``handler``) overridden."""
    from .systems import load_class

    cls = load_class(key)
    if overrides:
        cls = type(cls.__name__ + "Ab", (cls,), overrides)
    return cls(_sizes(scale))


def _peers(key: str, call: Callable[[Any, int], Any], **overrides: Any) -> Callable[[int, float], float]:
    def run(n: int, scale: float) -> float:
        system = _system(key, scale, **overrides)
        ok, note = system.available()
        if not ok:
            raise RuntimeError(note)
        system.setup()
        try:
            value = call(system, n)
        finally:
            system.teardown()
        if value is None:
            raise RuntimeError(f"{key} gave no number")
        return float(value)

    return run


def _cost(mode: str) -> Callable[[int, float], float]:
    def run(n: int, scale: float) -> float:
        from . import send_cost

        modes: dict[str, Callable[[int], Any]] = {
            "sender": send_cost.sender_only,
            "both": send_cost.both_sides,
            "both-async": lambda k: send_cost.both_sides(k, True),
            "request-async": lambda k: send_cost.requests(k, True),
            "both-qos1": lambda k: send_cost.both_sides(k, False, 1),
            "both-qos1-async": lambda k: send_cost.both_sides(k, True, 1),
        }
        return float(asyncio.run(modes[mode](n))) * 1e6  # microseconds of CPU per message

    return run


#: workload -> run(n, scale) -> the figure (its unit and direction are bench.ab's WORKLOADS)
RUNS: dict[str, Callable[[int, float], float]] = {
    "oneway": _peers("zmesh", lambda s, n: s.throughput(n)),
    "oneway-async": _peers("zmesh", lambda s, n: s.throughput(n), handler="async"),
    "rtt": _peers("zmesh", lambda s, n: s.rtt(n)[0]),
    "rtt-async": _peers("zmesh", lambda s, n: s.rtt(n)[0], handler="async"),
    "paced": _peers("zmesh", lambda s, n: s.paced(n)),
    "fanout": _peers("zmesh", lambda s, n: s.fanout(n, 4)),
    "inflight64": _peers("zmesh", lambda s, n: s.inflight(n)),
    "qos1": _peers("zmesh-qos1", lambda s, n: s.throughput(n)),
    "qos1-async": _peers("zmesh-qos1", lambda s, n: s.throughput(n), handler="async"),
    "rtt-p99": _peers("zmesh", lambda s, n: s.rtt(n)[1]),
    "rtt-loaded-p99": _peers("zmesh", lambda s, n: s.rtt_loaded(n)[1]),
    "payload-64k": _peers("zmesh", lambda s, n: s.payload(n, "payload-64k")),
    "payload-1m": _peers("zmesh", lambda s, n: s.payload(n, "payload-1m")),
    "send-cost": _cost("both"),
    "send-cost-async": _cost("both-async"),
    "request-async": _cost("request-async"),
    "sender-cost": _cost("sender"),
    "send-cost-qos1": _cost("both-qos1"),
    "send-cost-qos1-async": _cost("both-qos1-async"),
}


def _notes() -> list[str]:
    """What this tree lacks that the workloads work around."""
    import inspect

    import zmesh

    notes = []
    if "inline" not in inspect.signature(zmesh.Agent.add_handler).parameters:
        notes.append("no add_handler(inline=): the 'inline' handlers run as this zmesh runs plain functions")
    if not hasattr(zmesh.Node, "wait_acked"):
        notes.append("no Node.wait_acked: a QoS 1 run ends at the sink's n-th message, acks not awaited")
    return notes


def run(workload: str, n: int, scale: float) -> dict[str, Any]:
    """Measure *workload* once; the figure, where zmesh came from, and the tree's gaps."""
    import zmesh

    where = str(Path(zmesh.__file__).resolve().parent)
    tree = os.environ.get("ZMESH_AB_TREE")
    if tree and not where.startswith(str(Path(tree).resolve()) + os.sep):
        raise RuntimeError(f"zmesh imported from {where}, not from the tree under test {tree}")
    value = RUNS[workload](n, scale)
    return {"value": value, "zmesh": where, "version": zmesh.__version__, "notes": _notes()}


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in RUNS or not argv[1].isdigit():
        print(f"usage: python -m bench.ab_measure {{{','.join(RUNS)}}} N [SCALE]", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    os.environ["ZMESH_INTERFACES"] = "127.0.0.1"  # inherited by every peer process
    try:
        out = run(argv[0], int(argv[1]), float(argv[2]) if len(argv) > 2 else 1.0)
    except Exception as exc:  # noqa: BLE001 - one line for bench.ab, the traceback on stderr
        import traceback

        traceback.print_exc()
        print("AB_ERROR " + f"{type(exc).__name__}: {exc}".replace("\n", " | ")[:2000], flush=True)
        return 1
    print("AB_RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
