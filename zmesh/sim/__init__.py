"""A deterministic simulator for the mesh protocol engine (``zmesh._engine``).

Many real :class:`~zmesh._engine.Engine` objects run in one process over a
simulated network (ZeroMQ's semantics: see :mod:`.network`) and simulated
time, with faults drawn from a seed (:mod:`.faults`), a workload of requests,
broadcasts and subscription changes, and the invariants of
:mod:`.invariants` checked as the run goes and at its end. Pure Python: no
sockets, no asyncio, no clock reads that change the outcome.

    python -m zmesh.sim --nodes 50 --seed 1 --faults crash,restart,stall,partition,loss=0.05,dup,reorder

prints one JSON line (see :class:`SimResult`); the same seed gives the same
line, bar ``wall_seconds``.
"""

from __future__ import annotations

from .faults import FaultSpec, parse_faults
from .world import SimResult, World

__all__ = ["run", "SimResult", "FaultSpec", "parse_faults", "replay_command"]


def run(nodes: int = 5, seed: int = 1, faults: str | list[str] | tuple[str, ...] | FaultSpec | None = "",
        duration: float = 60.0, *, check_every: float = 0.5, settle: float = 60.0,
        verbose: bool = False, wake_resubscribes: bool = False) -> SimResult:
    """Run ``nodes`` engines for at least ``duration`` sim-seconds (longer while
    the mesh has not converged, up to ``settle`` s after the last fault heals).

    ``wake_resubscribes=True``: a stalled node's SUB resends its subscriptions
    when it wakes, as if it had reconnected (real ZeroMQ does not)."""
    world = World(nodes, seed, parse_faults(faults), duration, check_every=check_every,
                  settle=settle, verbose=verbose,
                  wake_resubscribes=wake_resubscribes)
    return world.run()


def replay_command(nodes: int, seed: int, faults: str | list[str] | FaultSpec | None, duration: float) -> str:
    """The command line that replays a run."""
    spec = ",".join(parse_faults(faults).names())
    tail = f" --faults {spec}" if spec else ""
    return f"python -m zmesh.sim --nodes {nodes} --seed {seed}{tail} --duration {duration:g}"
