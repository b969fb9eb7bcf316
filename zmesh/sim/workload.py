"""The sim's application: agents that send requests, broadcast and change
their subscriptions, at random (from the world's workload RNG) live nodes.

Every node hosts one agent, ``<node>.a``, with the capability "work"; every
agent answers every request "ok" (see :meth:`.node.SimNode.deliver`).
Message ids come from the seeded RNG, never from ``new_id()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..message import Message
from .invariants import REQUEST_TIMEOUT, Req

if TYPE_CHECKING:
    from .node import SimNode
    from .world import World

__all__ = ["Workload", "SUBSCRIPTIONS", "WORK_START", "WORK_RATE", "SHORT_REQUESTS"]

WORK_START = 1.0
WORK_RATE = 0.2  # local commands per node per second
SHORT_REQUESTS = 0.05  # this share of requests waits 1-300 ms, not REQUEST_TIMEOUT
SUBSCRIPTIONS: tuple[frozenset[str], ...] = (
    frozenset(), frozenset({"news.*"}), frozenset({"news.flash", "alerts.>"}),
)


class Workload:
    """Requests (85 %), broadcasts (10 %) and subscription changes (5 %)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = world.work_rng
        self.msgs = 0

    def msg_id(self) -> str:
        return f"{self.rng.getrandbits(112):028x}"

    def step(self) -> None:
        world, rng = self.world, self.rng
        world.sched.at(world.sched.now + rng.expovariate(WORK_RATE * world.n), self.step)
        ready = [n for n in world.live.values() if not n.stalled]
        if not ready:
            return
        node = rng.choice(ready)
        roll = rng.random()
        if roll < 0.70:
            self.request(node)
        elif roll < 0.85:
            self.send_qos1(node)
        elif roll < 0.95:
            self.msgs += 1
            msg = Message(type="notify", sender=node.agent, topic="news.flash", payload={"b": self.msgs},
                          timestamp=world.wall(), id=self.msg_id())
            world.count("broadcast_reached", node.broadcast(msg))
            world.count("broadcasts")
        else:
            node.set_subscriptions(rng.choice(SUBSCRIPTIONS))
            node.end_step()
            world.count("resubscribes")

    def send_qos1(self, node: SimNode) -> None:
        """A one-way qos 1 message to a random agent the node's registry knows."""
        world, rng = self.world, self.rng
        tid = rng.choice(world.ids)
        if tid == node.node_id or node.engine.registry.node_of(f"{tid}.a") is None:
            return
        self.msgs += 1
        msg = Message(type="notify", sender=node.agent, target=f"{tid}.a", topic="work.note",
                      payload={"n": self.msgs}, qos=1, timestamp=world.wall(), trace_id=f"t{self.msgs}",
                      id=self.msg_id())
        if node.call("send", node.engine.send, msg, None, world.sched.now):
            world.qos.add(msg.id, node, tid, world.sched.now)
            world.count("qos1_sends")
        node.end_step()

    def request(self, node: SimNode) -> None:
        """To a random agent the node's registry knows (it may be dead by now)."""
        world, rng = self.world, self.rng
        for _ in range(4):
            tid = rng.choice(world.ids)
            if tid != node.node_id and node.engine.registry.node_of(f"{tid}.a") is not None:
                break
        else:
            return
        now = world.sched.now
        self.msgs += 1
        corr = f"r{self.msgs}"
        msg = Message(type="query", sender=node.agent, target=f"{tid}.a", topic="work.do",
                      payload={"n": self.msgs}, correlation_id=corr, reply_to=node.agent,
                      timestamp=world.wall(), trace_id=f"t{self.msgs}", id=self.msg_id())
        # A few requests have short deadlines (they may time out): the engine must wake for them.
        timeout = rng.uniform(0.001, 0.3) if rng.random() < SHORT_REQUESTS else REQUEST_TIMEOUT
        key = node.request(msg, now + timeout)
        if key is None:
            world.requests.unroutable += 1
            return
        peer = node.engine.members.peers.get(tid)  # the incarnation the engine sent it to
        target = world.by_key.get(f"{tid}|{peer.incarnation}") if peer is not None else world.live.get(tid)
        world.requests.add(key, Req(corr, node, tid, target, now))
