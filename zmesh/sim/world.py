"""The simulated world: nodes, the workload, the faults, discovery, the checks.

Everything random comes from ``random.Random(seed)`` (split into one stream
for the network, one for the workload and one for the faults, so a change in
one does not reshuffle the others); everything happens in the order of the
event queue. Same seed, same run.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from .._engine import effects as fx
from ..message import Message
from .faults import DUP_P, Fault, FaultSpec, schedule
from .invariants import Episode, QosLog, RequestLog, check_mesh, check_requests, pending_mismatch
from .network import Network, Scheduler
from .node import SimNode
from .workload import SUBSCRIPTIONS, WORK_START, Workload

__all__ = ["World", "SimResult", "WALL_EPOCH"]

WALL_EPOCH = 1_700_000_000.0  # the sim's wall clock at sim time 0
START_SPREAD = 0.5  # nodes start one after another over this many seconds
MAX_VIOLATIONS = 40
HEAVY_LOSS = 0.1
REFRESH_TIME = 0.1  # a discovery refresh answers within this
# python-zeroconf's ServiceBrowser: the first query after 20-120 ms, then STARTUP_QUERIES=4
# queries in all, 1, 4 and 9 s apart; afterwards only TTL refreshes (PTR TTL: 75 minutes).
BROWSE_FIRST = (0.02, 0.12)
BROWSE_AFTER = (1.0, 5.0, 14.0)


@dataclass
class SimResult:
    nodes: int
    seed: int
    faults: list[str]
    converged_after_s: float | None
    frames_per_node: float
    bytes_per_node: float
    sim_seconds: float
    wall_seconds: float
    transitions: dict[str, int]
    violations: list[str]
    requests: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "nodes": self.nodes, "seed": self.seed, "faults": self.faults,
            "converged_after_s": self.converged_after_s, "frames_per_node": self.frames_per_node,
            "bytes_per_node": self.bytes_per_node, "sim_seconds": self.sim_seconds,
            "wall_seconds": self.wall_seconds, "transitions": self.transitions,
            "violations": self.violations, "requests": self.requests,
        })


class World:
    def __init__(self, nodes: int, seed: int, spec: FaultSpec, duration: float,
                 check_every: float = 0.5, settle: float = 60.0, stable: float = 5.0,
                 verbose: bool = False, wake_resubscribes: bool = False) -> None:
        if nodes < 2:
            raise ValueError("a mesh needs at least 2 nodes")
        root = random.Random(seed)
        self.net_rng = random.Random(root.getrandbits(64))
        self.work_rng = random.Random(root.getrandbits(64))
        fault_rng = random.Random(root.getrandbits(64))
        self.n, self.seed, self.spec = nodes, seed, spec
        self.duration, self.check_every, self.settle, self.stable = duration, check_every, settle, stable
        self.verbose = verbose
        self.sched = Scheduler()
        self.net = Network(self.sched, self.net_rng)
        self.net.resubscribe_on_wake = wake_resubscribes
        width = len(str(nodes - 1))
        self.ids = [f"n{i:0{width}d}" for i in range(nodes)]
        self.index = {nid: i for i, nid in enumerate(self.ids)}
        self.current: dict[str, SimNode] = {}  # node id -> its latest incarnation
        self.live: dict[str, SimNode] = {}
        self.instances: list[SimNode] = []
        self.by_key: dict[str, SimNode] = {}  # "node|incarnation" -> that incarnation
        self.departed: dict[str, None] = {}  # router endpoints of dead incarnations
        self.requests = RequestLog()
        self.qos = QosLog()
        self.episodes: list[Episode] = []
        self.cuts: list[tuple[str, ...]] = []
        self.faults, self.heal = schedule(spec, fault_rng, self.ids, duration)
        self._violations: dict[str, list[Any]] = {}  # dedup key -> [first text, count]
        self._uids = itertools.count(1)
        self.counts: dict[str, int] = {}
        self.holding_since: float | None = None
        self.converged_at: float | None = None
        self.done = False

    def set_faults(self, faults: list[Fault]) -> None:
        """Replace the drawn schedule with these faults (hand-built scenarios)."""
        self.faults = sorted(faults, key=lambda f: (f.at, f.kind, f.node))
        self.heal = max((max(f.at, f.until) for f in faults if f.kind != "oneway"), default=0.0)

    # -- bookkeeping -----------------------------------------------------

    def wall(self) -> float:
        return WALL_EPOCH + self.sched.now

    def violation(self, text: str, dedup: str | None = None) -> None:
        entry = self._violations.get(dedup or text)
        if entry is None:
            self._violations[dedup or text] = [text, 1]
        else:
            entry[1] += 1

    def engine_raised(self, node: SimNode, what: str, exc: BaseException) -> None:
        kind = f"{node.node_id}: {what} raised {type(exc).__name__}: {exc}"
        self.violation(f"t={self.sched.now:.3f} {kind}", dedup=kind)
        if self.verbose:
            import traceback
            traceback.print_exception(exc, file=sys.stderr)

    def engine_bug(self, node: SimNode, text: str) -> None:
        self.violation(f"t={self.sched.now:.3f} {node.node_id}: {text}", dedup=f"{node.node_id}: {text}")

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def count_effect(self, op: int, eff: tuple[Any, ...]) -> None:
        if op == fx.EVENT:
            self.count("event:" + eff[1].kind)
        elif op == fx.DEAD:
            self.count("dead:" + eff[2])
        elif op == fx.ACKED:
            self.count("acked")

    def delivered(self, node: SimNode, msg: Message, broadcast: bool) -> None:
        self.count("delivered:broadcast" if broadcast else "delivered:" + msg.type)

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"[sim t={self.sched.now:8.3f}] {text}", file=sys.stderr)

    # -- nodes -----------------------------------------------------------

    def start_node(self, node_id: str) -> None:
        now = self.sched.now
        uid = next(self._uids)
        i = self.index[node_id]
        seeds = tuple(dict.fromkeys(
            self.current[s].router for s in (self.ids[0], self.ids[i - 1]) if i > 0 and s in self.current
        ))
        node = SimNode(self, node_id, uid, f"{int(now * 1e6):016x}{uid:04x}",
                       f"sim://{node_id}/{uid}/router", f"sim://{node_id}/{uid}/pub", seeds)
        self.current[node_id] = node
        self.live[node_id] = node
        self.instances.append(node)
        self.by_key[node.key] = node
        self.net.register(node, node.router, node.pub)
        self.log(f"start {node_id} incarnation {node.incarnation} seeds {list(seeds)}")
        node.start(SUBSCRIPTIONS[1] if i % 3 == 0 else SUBSCRIPTIONS[0])
        self._announce(node)
        self._browse_anew(node)

    # -- discovery (mDNS as python-zeroconf does it) ------------------------

    def _announce(self, node: SimNode) -> None:
        """The node's service is announced: every node reachable now learns its router."""
        now = self.sched.now
        rng = self.net_rng
        for other in self.live.values():
            if other is not node and not self.net.apart(node.node_id, other.node_id):
                self.sched.at(now + rng.uniform(0.005, 0.05), other.on_discovered, node.router)

    def _browse_anew(self, node: SimNode) -> None:
        """(Re)start the node's browser: STARTUP_QUERIES queries, then none for long."""
        node.browser += 1
        first = self.net_rng.uniform(*BROWSE_FIRST)
        for offset in (0.0, *BROWSE_AFTER):
            self.sched.at(self.sched.now + first + offset, self._browse, node, node.browser)

    def _browse(self, node: SimNode, browser: int) -> None:
        """One query: the node learns the router of every node that answers."""
        if not node.alive or browser != node.browser:
            return
        now = self.sched.now
        rng = self.net_rng
        for other in self.live.values():
            if other is not node and not self.net.apart(node.node_id, other.node_id):
                self.sched.at(now + rng.uniform(0.005, 0.05), node.on_discovered, other.router)

    def rediscover(self, node: SimNode) -> None:
        """REDISCOVER, as zmesh.discovery's refresh(): re-announce the node and
        restart its browser (one refresh already in flight answers the same)."""
        now = self.sched.now
        if now < node.refresh_until:
            self.count("rediscover_coalesced")
            return
        node.refresh_until = now + REFRESH_TIME
        self.count("rediscover")
        self._announce(node)
        self._browse_anew(node)

    # -- faults ----------------------------------------------------------

    def apply(self, fault: Fault) -> None:
        self.log(fault.describe())
        net = self.net
        if fault.kind == "crash":
            node = self.live.pop(fault.node, None)
            if node is not None:
                if node.stalled:  # its stall ends with it
                    self.episodes = [Episode(ep.kind, ep.start, fault.at, node=ep.node)
                                     if ep.kind == "stall" and ep.node == node.node_id and ep.end > fault.at
                                     else ep for ep in self.episodes]
                node.crash()
                net.died(node)
                self.departed[node.router] = None
        elif fault.kind == "restart":
            if fault.node not in self.live:
                self.start_node(fault.node)
        elif fault.kind == "stall":
            node = self.live.get(fault.node)
            if node is not None and not node.stalled:
                node.stall()
                self.episodes.append(Episode("stall", fault.at, fault.until, node=fault.node))
                self.sched.at(fault.until, self._unstall, node)
        elif fault.kind == "partition":
            self.cuts.append(fault.group)
            self.episodes.append(Episode("partition", fault.at, fault.until, group=fault.group))
            net.cut(self._sides())
            self.sched.at(fault.until, self._heal_cut, fault.group)
        elif fault.kind == "lossy":
            if self.spec.loss >= HEAVY_LOSS:  # six lost beats in a row are likely enough: a peer may expire
                self.episodes.append(Episode("loss", fault.at, fault.until))
            net.loss = self.spec.loss
            net.dup = DUP_P if self.spec.dup else 0.0
            net.reorder = self.spec.reorder
            self.sched.at(fault.until, self._calm)
        elif fault.kind == "oneway":
            net.blocked[(fault.node, fault.group[0])] = None

    def _sides(self) -> dict[str, int] | None:
        if not self.cuts:
            return None
        return {nid: sum(1 << k for k, group in enumerate(self.cuts) if nid in group) for nid in self.ids}

    def _heal_cut(self, group: tuple[str, ...]) -> None:
        self.log(f"partition {'+'.join(group)}|rest heals")
        self.cuts.remove(group)
        self.net.heal(self._sides())

    def _unstall(self, node: SimNode) -> None:
        self.log(f"stall of {node.node_id} ends ({len(node.backlog)} inputs queued)")
        node.unstall()

    def _calm(self) -> None:
        self.log("loss/dup/reorder end")
        self.net.loss, self.net.dup, self.net.reorder = 0.0, 0.0, False

    # -- checks ----------------------------------------------------------

    def live_nodes(self) -> list[SimNode]:
        return sorted(self.live.values(), key=lambda n: n.node_id)

    def _check(self) -> None:
        now = self.sched.now
        self.sched.at(now + self.check_every, self._check)
        bad = check_mesh(self.live_nodes(), self.departed, self.requests, now, limit=1)
        if bad:
            if self.converged_at is not None:
                self.violation(f"t={now:.3f}: invariants broke after holding since {self.converged_at:.3f}: {bad[0]}")
                self.converged_at = None
            self.holding_since = None
        else:
            if self.holding_since is None:
                self.holding_since = now
            if self.converged_at is None and now - self.holding_since >= self.stable - 1e-9:
                self.converged_at = self.holding_since
                self.log(f"converged at {self.holding_since:.3f} ({self.holding_since - self.heal:.3f} s after the heal)")
        if now >= self.duration and (
            (self.converged_at is not None and not self.qos.owed(self.live))
            or now >= self.heal + self.settle
        ):
            self.done = True

    def _progress(self) -> None:
        self.sched.at(self.sched.now + 5.0, self._progress)
        self.log(f"{len(self.live)} live, {self.sched.events} events, {self.net.frames} frames, "
                 f"{len(self.requests.by_key)} requests")

    # -- the run ---------------------------------------------------------

    def run(self) -> SimResult:
        logger = logging.getLogger("zmesh")
        level = logger.level
        if not self.verbose:
            logger.setLevel(logging.CRITICAL + 1)  # the engines log drops once per peer: noise here
        try:
            return self._run()
        finally:
            logger.setLevel(level)

    def _run(self) -> SimResult:
        started = time.perf_counter()
        sched = self.sched
        for i, nid in enumerate(self.ids):
            sched.at(i * START_SPREAD / self.n, self.start_node, nid)
        for fault in self.faults:
            sched.at(fault.at, self.apply, fault)
        sched.at(WORK_START, Workload(self).step)
        sched.at(self.heal + self.check_every, self._check)
        if self.verbose:
            sched.at(5.0, self._progress)
        sched.run_until(lambda: self.done, self.duration + self.settle + self.check_every)
        return self.result(time.perf_counter() - started)

    def result(self, wall: float) -> SimResult:
        now = self.sched.now
        live = self.live_nodes()
        found = [text for text, _ in self._violations.values()]
        counts = [c for _, c in self._violations.values()]
        found = [t if c == 1 else f"{t} (x{c})" for t, c in zip(found, counts)]
        found += check_mesh(live, self.departed, self.requests, now)
        found += check_requests(self.requests, self.episodes, now)
        found += pending_mismatch(self.requests, live)
        found += self.qos.check(self.live)
        if len(found) > MAX_VIOLATIONS:
            found = found[:MAX_VIOLATIONS] + [f"... and {len(found) - MAX_VIOLATIONS} more"]
        transitions: dict[str, int] = {}
        for node in self.instances:
            for (state, event), c in node.engine.transitions.items():
                name = f"{state}/{event}"
                transitions[name] = transitions.get(name, 0) + c
        requests = {"sent": len(self.requests.by_key), "unroutable": self.requests.unroutable,
                    "qos1_sent": len(self.qos.sent), **self.requests.outcomes, **self.counts}
        converged = None if self.converged_at is None else round(self.converged_at - self.heal, 3)
        return SimResult(
            nodes=self.n, seed=self.seed, faults=[f.describe() for f in self.faults],
            converged_after_s=converged, frames_per_node=round(self.net.frames / self.n, 1),
            bytes_per_node=round(self.net.bytes / self.n, 1), sim_seconds=round(now, 3),
            wall_seconds=round(wall, 3), transitions=dict(sorted(transitions.items())),
            violations=found, requests=dict(sorted(requests.items())),
        )
