"""A hostile peer for tests/test_hostile.py: raw pyzmq and msgpack, no zmesh.

    python -m tests._hostile_peer '{"router": ..., "pub": ..., "mesh": ..., ...}'

It knows only what an attacker on the same host could: a node's endpoints
and what the node tells it. It prints one JSON line per event ("ready",
"joined", "sent", "answered" ...) and reads one JSON command per line on
stdin; it exits when stdin closes (or after ``lifetime`` seconds), closing
every socket.

Settings (the JSON argument):

* ``router``, ``pub``: the victim node's endpoints.
* ``mesh``, ``name``, ``inc``, ``agents``: who it says it is. Without
  ``name`` it never joins (a stranger).
* ``answer``: reply to every request it receives with this payload
  (an impostor of the agents it claims).
* ``knock``: say HELLO(reply=true) again every this many seconds (a node
  that wants in keeps knocking).
* ``peers``: how many made-up peers its HELLO lists.
* ``max_payload``: the limit its record says it has (default 1 MiB).
* ``curve``: ``{"public": z85, "secret": z85}``: a keyed attacker (a key the
  victim trusts, or not): every socket it opens speaks CurveZMQ, its own
  ROUTER and XPUB as servers, its dialling sockets as clients of the key
  after the ``#`` of ``router``/``pub``.
* ``no_sub``: join without subscribing to the victim (a slow joiner, as the
  victim sees it: its HELLO came, its SUB never attached).
* ``credit``: report every message sent to its agents as taken (CREDIT
  items, so flow control never holds the sender back), while never
  acknowledging one (no HANDLED): a receiver that takes and keeps.

Commands (stdin):

* ``{"cmd": "raw", "routing_id": ..., "frames": [hex, ...], "repeat": n, "every": s}``:
  send frames from a DEALER with this routing id (a stranger, or one that
  pretends to be another node's connection).
* ``{"cmd": "replies", "target": agent, "corr": [...], "count": n}``: forged
  replies from our agent to ``target``'s pending requests.
* ``{"cmd": "messages", "target": agent, "topic_bytes": n, "payload_bytes": n,
  "count": n, "topic": "..."}``: direct messages from our agent (or ``sender``);
  ``request``: with a correlation id, answered to ``reply_to`` (default:
  the sender); ``qos``, ``ttl``, ``id`` (the same id every time).
* ``{"cmd": "ready", "keys": [node_key, ...]}``: subscriber-ready markers
  (``J`` + a node key) for other nodes, from our SUB.
* ``{"cmd": "report", "after": s}``: after serving ``s`` seconds, say how many
  messages and replies arrived.
* ``{"cmd": "flood", "bytes": n, "frame_bytes": n}``: PING items from a
  DEALER that never says HELLO.
* ``{"cmd": "ghosts", "count": n}``: HELLOs of ``n`` made-up nodes, one DEALER each.
* ``{"cmd": "handshakes", "count": n, "batch": b, "every": s, "seconds": t}``:
  ``n`` DEALERs (``b`` at a time, each kept ``s`` seconds, for at most ``t``
  seconds) that start a CurveZMQ handshake with our key and send a PING.
* ``{"cmd": "records", "names": n, "agents": m, "pad": p, "updates": k, "every": s}``:
  a registry flood: ``n`` made-up nodes (one DEALER each), each listing ``m``
  agents whose ids are ``p`` characters longer than needed, made "joined"
  with their own subscriber-ready markers; then ``k`` rounds of an UPDATE
  from each (a record with a higher ``seq``), ``s`` seconds apart, while
  answering the victim's pings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import msgpack
import zmq

MSG, HELLO, UPDATE, ACK, PING, PONG, CREDIT = 0, 1, 2, 3, 4, 5, 8


def say(**event: Any) -> None:
    print(json.dumps(event), flush=True)


class Hostile:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.ctx = zmq.Context()
        self.ctx.setsockopt(zmq.MAX_SOCKETS, 8192)
        self.sockets: list[zmq.Socket[Any]] = []
        self.curve: dict[str, str] | None = cfg.get("curve")
        self.victim_router, _, self.server_key = cfg["router"].partition("#")
        self.victim_pub = cfg["pub"].partition("#")[0]
        self.suffix = f"#{self.curve['public']}" if self.curve else ""
        self.router = self.socket(zmq.ROUTER, server=True)
        self.router_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.xpub = self.socket(zmq.XPUB, server=True)
        self.pub_port = self.xpub.bind_to_random_port("tcp://127.0.0.1")
        self.name: str | None = cfg.get("name")
        self.inc = cfg.get("inc", "0000000000000001000001")
        self.key = f"{self.name}|{self.inc}"
        self.dealer: zmq.Socket[Any] | None = None
        self.sub: zmq.Socket[Any] | None = None
        self.joined = False
        self.answered = 0
        self.received: list[Any] = []
        self.results = 0  # replies received
        self.ok = 0  # of which status "ok"
        self.next_knock = 0.0
        self.next_beat = 0.0
        self.ids = 0
        self.pending = b""
        self.taken: dict[str, int] = {}  # agent -> messages received for it (with ``credit``)

    def socket(self, kind: int, server: bool = False, **options: Any) -> zmq.Socket[Any]:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.curve["secret"].encode())
            if server:
                sock.setsockopt(zmq.CURVE_SERVER, 1)
            else:
                sock.setsockopt(zmq.CURVE_PUBLICKEY, self.curve["public"].encode())
                sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_key.encode())
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        self.sockets.append(sock)
        return sock

    def new_id(self) -> str:
        self.ids += 1
        return f"{int(time.time() * 1000):012x}{os.getpid():010x}{self.ids:06x}"

    # -- who we say we are ---------------------------------------------------

    def record(self) -> dict[str, Any]:
        router = f"tcp://127.0.0.1:{self.router_port}{self.suffix}"
        pub = f"tcp://127.0.0.1:{self.pub_port}{self.suffix}"
        return {
            "mesh": self.cfg["mesh"], "node": self.name, "inc": self.inc, "v": 1,
            "router": router, "pub": pub, "routers": [router], "pubs": [pub], "seq": 1,
            "agents": {a: [] for a in self.cfg.get("agents", [])}, "subs": {}, "max_payload": self.cfg.get("max_payload", 1 << 20),
        }

    def hello(self, reply: bool) -> bytes:
        peers = [[f"ghost-{i}", [f"tcp://127.0.0.1:{20000 + i}"]] for i in range(self.cfg.get("peers", 0))]
        return msgpack.packb([1, [HELLO, self.record(), peers, reply]])

    def join(self) -> None:
        if not self.cfg.get("no_sub"):
            self.subscribe(b"J" + self.key.encode())
        self.dealer = self.socket(zmq.DEALER, ROUTING_ID=self.key.encode())
        self.dealer.connect(self.victim_router)
        self.dealer.send(self.hello(True))
        self.next_knock = time.monotonic() + self.cfg.get("knock", 1e9)

    def subscribe(self, prefix: bytes) -> None:
        if self.sub is None:
            self.sub = self.socket(zmq.SUB, SNDHWM=0)
            self.sub.connect(self.victim_pub)
        self.sub.setsockopt(zmq.SUBSCRIBE, prefix)

    # -- what arrives ----------------------------------------------------------

    def on_router(self) -> None:
        while self.router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            parts = self.router.recv_multipart()
            try:
                frame = msgpack.unpackb(parts[-1], raw=False, strict_map_key=False)
            except Exception:
                continue
            before = dict(self.taken)
            for item in frame[1:]:
                self.on_item(item)
            if self.dealer is not None and self.taken != before:
                credits = [[CREDIT, agent, n] for agent, n in self.taken.items() if before.get(agent) != n]
                self.dealer.send(msgpack.packb([1, *credits]))

    def on_item(self, item: list[Any]) -> None:
        kind = item[0]
        if kind in (ACK, HELLO) and not self.joined and self.name:
            self.joined = True
            say(event="joined")
        elif kind == PING and len(item) > 1 and item[1] is True and self.dealer is not None:
            self.dealer.send(msgpack.packb([1, [PONG]]))
        elif kind == MSG and len(item) == 15:
            self.received.append(item[5])
            if self.cfg.get("credit") and item[2] != 1:
                self.taken[item[4]] = self.taken.get(item[4], 0) + 1
            if item[2] == 1:
                self.results += 1
                self.ok += item[13] == 0
            answer = self.cfg.get("answer")
            if answer is not None and item[6] and item[2] != 1 and self.dealer is not None:
                reply = [MSG, self.new_id(), 1, item[4], item[7] or item[3], item[5], item[6], "",
                         item[8], 0, None, time.time(), item[12], 0, answer]
                self.dealer.send(msgpack.packb([1, reply]))
                self.answered += 1
                say(event="answered", count=self.answered)

    # -- commands --------------------------------------------------------------

    def command(self, cmd: dict[str, Any]) -> None:
        what = cmd["cmd"]
        if what == "raw":
            dealer = self.socket(zmq.DEALER, ROUTING_ID=cmd["routing_id"].encode())
            dealer.connect(self.victim_router)
            frames = [bytes.fromhex(f) for f in cmd["frames"]]
            for i in range(cmd.get("repeat", 1)):
                for frame in frames:
                    dealer.send(frame)
                if cmd.get("every"):
                    self.wait(cmd["every"])
            say(event="sent", cmd=what)
        elif what == "replies":
            assert self.dealer is not None
            sender = self.cfg["agents"][0]
            sent = 0
            for _ in range(cmd.get("count", 1)):
                for corr in cmd["corr"]:
                    reply = [MSG, self.new_id(), 1, sender, cmd["target"], "whoami", corr, "", 3, 0, None,
                             time.time(), "", 0, "forged"]
                    self.dealer.send(msgpack.packb([1, reply]))
                    sent += 1
            say(event="sent", cmd=what, count=sent)
        elif what == "messages":
            assert self.dealer is not None
            sender = cmd.get("sender") or self.cfg["agents"][0]
            topic = cmd.get("topic") or "t." + "x" * cmd.get("topic_bytes", 1)
            payload = b"p" * cmd.get("payload_bytes", 1)
            for i in range(cmd["count"]):
                corr = self.new_id() if cmd.get("request") else ""
                msg = [MSG, cmd.get("id") or self.new_id(), 0 if corr else 3, sender, cmd["target"],
                       f"{topic}{i}" if cmd.get("vary") else topic, corr, cmd.get("reply_to", sender if corr else ""),
                       3, cmd.get("qos", 0), cmd.get("ttl"), time.time(), "", 0, payload]
                self.dealer.send(msgpack.packb([1, msg]))
                if i % 16 == 15:
                    self.wait(0.001)  # let the node's flow of ACKs and our beats through
            say(event="sent", cmd=what, count=cmd["count"])
        elif what == "flood":
            if cmd.get("joined"):
                assert self.dealer is not None
                dealer = self.dealer
            else:
                dealer = self.socket(zmq.DEALER, ROUTING_ID=b"flooder", SNDHWM=0)
                dealer.connect(self.victim_router)
            ping = msgpack.packb([PING, True])
            per_frame = max(1, cmd.get("frame_bytes", 1 << 20) // len(ping))
            per_frame = min(per_frame, cmd.get("items") or per_frame)
            header = (b"\xdc" + (per_frame + 1).to_bytes(2, "big") if per_frame < 0xFFFF
                      else b"\xdd" + (per_frame + 1).to_bytes(4, "big"))
            frame = header + msgpack.packb(1) + ping * per_frame
            sent = frames = 0
            while sent < cmd["bytes"]:
                dealer.send(frame)
                sent += len(frame)
                frames += 1
            say(event="sent", cmd=what, bytes=sent, frames=frames)
        elif what == "ghosts":
            for i in range(cmd["count"]):
                name, inc = f"ghost-node-{i}", "0000000000000001000001"
                dealer = self.socket(zmq.DEALER, ROUTING_ID=f"{name}|{inc}".encode())
                dealer.connect(self.victim_router)
                record = dict(self.record(), node=name, inc=inc, agents={},
                              router=f"tcp://127.0.0.1:{30000 + i}", routers=[f"tcp://127.0.0.1:{30000 + i}"])
                dealer.send(msgpack.packb([1, [HELLO, record, [], False]]))
            say(event="sent", cmd=what, count=cmd["count"])
        elif what == "handshakes":
            # CURVE handshakes with our key (trusted or not), ``batch`` sockets at a time
            opened, end = 0, time.monotonic() + cmd.get("seconds", 5.0)
            while opened < cmd["count"] and time.monotonic() < end:
                batch = []
                for _ in range(cmd.get("batch", 100)):
                    try:
                        batch.append(self.socket(zmq.DEALER))
                    except zmq.ZMQError:  # EMFILE: libzmq reaps closed sockets on its own time
                        break
                for sock in batch:
                    sock.connect(self.victim_router)
                    try:
                        sock.send(msgpack.packb([1, [PING, False]]), zmq.NOBLOCK)
                    except zmq.ZMQError:  # not connected yet: the handshake is the point
                        pass
                self.wait(cmd.get("every", 0.05))
                for sock in batch:
                    sock.close(0)
                    self.sockets.remove(sock)
                opened += len(batch)
            say(event="sent", cmd=what, count=opened)
        elif what == "records":
            self.records(cmd)
        elif what == "ready":
            for key in cmd["keys"]:
                self.subscribe(b"J" + key.encode())
            say(event="sent", cmd=what, count=len(cmd["keys"]))
        elif what == "report":
            self.wait(cmd.get("after", 0))
            say(event="report", received=len(self.received), results=self.results, ok=self.ok)
        else:
            say(event="error", what=f"unknown command {what!r}")

    def records(self, cmd: dict[str, Any]) -> None:
        inc = "0000000000000001000001"
        ghosts = []
        for i in range(cmd["names"]):
            name = f"flood-{i}"
            dealer = self.socket(zmq.DEALER, ROUTING_ID=f"{name}|{inc}".encode(), SNDHWM=0)
            dealer.connect(self.victim_router)
            agents = {f"{name}-{j:06d}-" + "x" * cmd.get("pad", 0): ["cap-one", "cap-two"]
                      for j in range(cmd["agents"])}
            record = dict(self.record(), node=name, inc=inc, agents=agents)
            dealer.send(msgpack.packb([1, [HELLO, record, [], False]]))
            self.subscribe(b"J" + f"{name}|{inc}".encode())
            ghosts.append((dealer, record))
        say(event="sent", cmd="records", names=len(ghosts))
        for round_ in range(cmd.get("updates", 0)):
            self.wait(cmd.get("every", 0.1))
            for dealer, record in ghosts:
                record["seq"] += 1
                dealer.send(msgpack.packb([1, [UPDATE, record]]))
                dealer.send(msgpack.packb([1, [PING, False]]))
        say(event="sent", cmd="updates", rounds=cmd.get("updates", 0))

    # -- the loop --------------------------------------------------------------

    def wait(self, seconds: float) -> None:
        """Serve the router for ``seconds`` (answer pings and requests, keep beating)."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.step(min(left, 0.05), stdin=False)

    def step(self, timeout: float, stdin: bool = True) -> bool:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        if stdin:
            poller.register(sys.stdin.fileno(), zmq.POLLIN)
        ready = dict(poller.poll(int(timeout * 1000)))
        if self.router in ready:
            self.on_router()
        now = time.monotonic()
        if self.dealer is not None and now >= self.next_knock:
            self.dealer.send(self.hello(True))
            self.next_knock = now + self.cfg.get("knock", 1e9)
        if self.dealer is not None and now >= self.next_beat:
            self.dealer.send(msgpack.packb([1, [PING, False]]))
            self.next_beat = now + 0.1
        if stdin and sys.stdin.fileno() in ready:
            data = os.read(sys.stdin.fileno(), 65536)
            if not data:
                return False
            self.pending += data
            while b"\n" in self.pending:
                line, _, self.pending = self.pending.partition(b"\n")
                if line.strip():
                    self.command(json.loads(line))
        return True

    def run(self) -> None:
        if self.name:
            self.join()
        say(event="ready", router=f"tcp://127.0.0.1:{self.router_port}", key=self.key)
        end = time.monotonic() + self.cfg.get("lifetime", 60.0)
        try:
            while time.monotonic() < end and self.step(0.05):
                pass
        finally:
            for sock in self.sockets:
                sock.close(0)
            self.ctx.term()


if __name__ == "__main__":
    Hostile(json.loads(sys.argv[1])).run()
