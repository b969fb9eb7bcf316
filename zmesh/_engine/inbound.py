"""What arrives: decoding and checking frames, then handing each item to its
place (membership, pending requests, local agents). Anything unusable is
dropped, counted and logged once per peer and reason (see docs/protocol.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._wire import codec
from .._wire.names import MAX_AGENT_ID, PROTOCOL_TOPICS, node_address, replies_to
from ..errors import FrameError, ZmeshError
from ..message import Message
from ..topics import matches
from . import admission
from .bad_items import bad_item, published_error
from .config import LOCAL
from .effects import DEAD, DELIVER, NODE_MSG

if TYPE_CHECKING:
    from .core import Engine
    from .members import Peer

__all__ = ["direct", "published"]


_OPENING = frozenset((codec.HELLO, codec.REFUSE))


def direct(engine: Engine, key: str | None, frame: codec.Received) -> None:
    """A direct frame; ``key`` is None for the engine's own loopback."""
    where = key or engine.node_id
    members = engine.members
    now = engine.now
    peer = None if key is None else members.by_key.get(key)
    if peer is None and key is not None:
        _stranger(engine, key, frame)
        return
    if peer is not None and peer.public_key != engine.sender_public_key:  # keyless: None == None
        engine.drop("wrong_key", where, "a frame over a peer's connection from another key")
        return
    try:
        items = codec.decode_frame(frame, engine.max_frame)
    except FrameError as exc:
        engine.drop(exc.reason, where, exc.detail)
        return
    if peer is not None:
        peer.last_heard = now
        peer.answered = True
        if peer.state == "evasive":
            members.heard(peer, now)
    engine.stats["frames_received"] += 1
    size = len(frame) // len(items) if items else 0  # each item's share, for inbox byte limits
    for item in items:
        try:
            kind = item[0]
            if kind == codec.MSG:
                if key is not None and peer is None:
                    raise FrameError("unknown_peer", "message before hello")
                msg = codec.message_from_item(item)
                if engine.decoder is not None:
                    why = _decode(engine.decoder, msg)
                    if why:
                        _undecodable(engine, msg, item, peer, where, key is None, why)
                        continue
                _message(engine, msg, peer, size)
            elif kind == codec.BAD:
                bad_item(engine, item, peer, where, key is None)
            elif key is None:
                raise FrameError("malformed", "control item on loopback")
            else:
                control = codec.parse_control(item)
                if isinstance(control, codec.Hello):
                    members.on_hello(key, control, now)
                    peer = members.by_key.get(key)
                elif isinstance(control, codec.Refuse):
                    admission.on_refuse(members, control)
                elif peer is None:
                    raise FrameError("unknown_peer", f"item kind {kind} before hello")
                else:
                    members.on_control(peer, control, now)
                    if peer.node_id not in members.peers:
                        peer = None  # it said BYE
        except FrameError as exc:
            engine.drop(exc.reason, where, exc.detail)
        except ZmeshError as exc:
            engine.drop("rejected", where, str(exc))


def _stranger(engine: Engine, key: str, frame: codec.Received) -> None:
    """A frame over a connection that has not said HELLO: only a HELLO or a
    REFUSE is taken, and nothing is decoded past the first item's kind, so
    a flood from a stranger costs one look per frame."""
    try:
        item = codec.decode_opening(frame, engine.max_frame, _OPENING)
        if item is None:
            raise FrameError("unknown_peer", "nothing but HELLO before HELLO")
        engine.stats["frames_received"] += 1
        control = codec.parse_control(item)
        if isinstance(control, codec.Hello):
            engine.members.on_hello(key, control, engine.now)
        elif isinstance(control, codec.Refuse):
            admission.on_refuse(engine.members, control)
    except FrameError as exc:
        engine.drop(exc.reason, key, exc.detail)
    except ZmeshError as exc:
        engine.drop("rejected", key, str(exc))


#: What a publish frame adds to its items, at most (its node id and seq).
PUB_OVERHEAD = 512


def published(engine: Engine, frame: codec.Received) -> None:
    engine.stats["bytes_received"] += len(frame)
    try:
        node_id, seq, items = codec.decode_pub_frame(frame, engine.max_frame)
    except FrameError as exc:
        engine.drop(exc.reason, "publisher")
        return
    peer = engine.members.peers.get(node_id)
    if peer is None:
        engine.drop("unknown_publisher", node_id)
        return
    if peer.public_key != engine.sender_public_key:  # keyed mode: a broadcast in another node's name
        engine.drop("wrong_key", node_id, "published by another key")
        return
    rule = peer.rule
    engine.members.heard(peer, engine.now)
    engine.stats["frames_received"] += 1
    if len(items) == 1 and len(frame) > engine.max_payload + PUB_OVERHEAD:
        # A publisher sends an item over some subscriber's limit alone, and
        # leaves out its subscribers: only a node that does not play by that sends one.
        engine.drop("too_big", node_id, f"a broadcast of about {len(frame)} bytes")
        return
    size = len(frame) // len(items) if items else 0
    for item in items:
        try:
            if item[0] != codec.MSG:
                raise published_error(item)
            msg = codec.message_from_item(item)
            if msg.target:
                raise FrameError("malformed", "published message with a target")
            if (msg.sender not in peer.record.agents and seq <= peer.record.seq
                    and msg.sender != node_address(peer.node_id)):  # a node's own: a will it publishes
                raise FrameError("spoofed_sender", msg.sender)
            if rule is not None and not rule.topic_ok(msg.topic):
                raise FrameError("policy", f"its key may not use topic {msg.topic!r}")
            if engine.decoder is not None:
                why = _decode(engine.decoder, msg)
                if why:
                    raise FrameError("decoder_error", why)
            _fan_out(engine, msg, size)
        except FrameError as exc:
            engine.drop(exc.reason, node_id, exc.detail)


def _decode(decoder: codec.Decoder, msg: Message) -> str:
    """Apply the node's decoder (``Node(decoder=...)``) to ``msg``'s payload;
    "" when done, else why it failed. Error replies keep zmesh's own payload."""
    if msg.status != "ok":
        return ""
    try:
        msg.payload = codec.decode_payload(msg.payload, decoder)
    except Exception as exc:  # the user's code: any error, said to the sender
        return f"the node's decoder raised {type(exc).__name__}: {exc}"[:200]
    return ""


def _undecodable(
    engine: Engine, msg: Message, item: list[Any], peer: Peer | None, where: str, loopback: bool, why: str
) -> None:
    """The node's decoder failed on direct message ``msg``. Its sender hears
    of it as of an item that did not decode (a request is answered with an
    error, a reply fails its request); a message for a local agent is
    dead-lettered here like one whose handler raised, and a one-way qos >= 1
    one is acknowledged: sending it again would fail the same way."""
    bad_item(engine, [codec.BAD, "decoder_error", why, item[:-1] + [None]], peer, where, loopback)
    if msg.type == "result" or msg.target not in engine.agents:
        return
    if peer is not None and msg.sender not in peer.record.agents:
        return
    if msg.qos and not msg.correlation_id:
        origin = LOCAL if peer is None else peer.node_id
        if not engine.reliable.accept(origin, msg):
            return  # a repeat: acknowledged again, dead-lettered the first time
        engine.handled(origin, msg)
    engine.effects.append((DEAD, msg, "handler_error", why, msg.target))


def _message(engine: Engine, msg: Message, peer: Peer | None, size: int) -> None:
    if (peer is not None and msg.sender not in peer.record.agents and msg.sender != node_address(peer.node_id)
            and not _answers_what_it_was_asked(engine, msg, peer)):
        raise FrameError("spoofed_sender", msg.sender)
    if (peer is not None and peer.rule is not None and msg.type != "result" and not peer.rule.topic_ok(msg.topic)
            and msg.topic not in PROTOCOL_TOPICS):
        _not_allowed(engine, msg, peer)
        return
    reply_to = msg.reply_to
    if (reply_to and reply_to != msg.sender and peer is not None and msg.type != "result"
            and not replies_to(reply_to, msg.sender)):
        _elsewhere(engine, msg, peer)
        return
    engine.messages_received += 1
    if msg.type == "result" and msg.correlation_id:
        if not engine.requests.resolve(msg, engine.node_id if peer is None else peer.node_id):
            engine.stats["late_replies"] += 1
    elif not msg.target:
        _fan_out(engine, msg, size)
    else:
        origin = LOCAL if peer is None else peer.node_id
        if msg.target in engine.agents:
            if msg.qos and not engine.reliable.accept(origin, msg):
                engine.flow.taken(origin, msg.target)  # a repeat: answered, never handled twice
                return
            engine.effects.append((DELIVER, msg.target, msg, False, origin, size))
        elif msg.target == node_address(engine.node_id):  # for the node itself: a stats request
            if msg.qos and not engine.reliable.accept(origin, msg):
                engine.flow.taken(origin, msg.target)
                return
            engine.effects.append((NODE_MSG, msg, origin))
        else:
            if len(msg.target) > MAX_AGENT_ID:  # no node hosts it; its flow-control entry would stay
                raise FrameError("malformed", "target longer than an agent id")
            why = f"agent {msg.target!r} is not registered on node {engine.node_id!r}"
            engine.flow.taken(origin, msg.target)
            if msg.qos and not msg.correlation_id:
                # Its sender keeps it and sends it again where the agent is then.
                engine.drop("not_found", origin, why)
                engine.unhandled(origin, msg)
                return
            engine.effects.append((DEAD, msg, "not_found", why, msg.target))
            if msg.correlation_id:
                engine.reply_status(msg, "not_found", why)


def _not_allowed(engine: Engine, msg: Message, peer: Peer) -> None:
    """The policy does not let ``peer``'s key use ``msg``'s topic: dropped,
    counted, dead-lettered here; a request is answered with an error and a
    one-way qos >= 1 message acknowledged (sending it again would fail the same way)."""
    origin = peer.node_id
    why = f"the policy does not let node {origin!r}'s key use topic {msg.topic!r}"
    engine.drop("policy", origin, why)
    if not msg.target:
        return  # a broadcast sent directly: it reaches nobody
    if len(msg.target) > MAX_AGENT_ID:
        raise FrameError("malformed", "target longer than an agent id")
    engine.flow.taken(origin, msg.target)
    if msg.qos and not msg.correlation_id:
        if not engine.reliable.accept(origin, msg):
            return  # a repeat: acknowledged again, dead-lettered the first time
        engine.handled(origin, msg)
    engine.effects.append((DEAD, msg, "policy", why, msg.target))
    if msg.correlation_id:
        engine.reply_status(msg, "error", {"type": "PolicyError", "message": why})


def _elsewhere(engine: Engine, msg: Message, peer: Peer) -> None:
    """A request from ``peer`` wants its reply sent to someone else: zmesh
    never sends one (a reply goes back to its requester), and answering would
    make this node send unasked-for replies wherever a peer says. Dropped,
    counted, and the requester alone is answered with an error."""
    origin = peer.node_id
    why = f"reply_to {msg.reply_to[:MAX_AGENT_ID]!r} is not the requester {msg.sender!r}: replies go back to it"
    engine.drop("reply_elsewhere", origin, why)
    if msg.target:
        if len(msg.target) > MAX_AGENT_ID:
            raise FrameError("malformed", "target longer than an agent id")
        engine.flow.taken(origin, msg.target)
    if msg.correlation_id:
        msg.reply_to = ""
        engine.reply_status(msg, "error", {"type": "InvalidMessage", "message": why})


def _fan_out(engine: Engine, msg: Message, size: int) -> None:
    for agent_id, (_, subs) in engine.agents.items():
        if agent_id != msg.sender and subs and any(matches(p, msg.topic) for p in subs):
            engine.effects.append((DELIVER, agent_id, msg, True, "", size))


def _answers_what_it_was_asked(engine: Engine, msg: Message, peer: Peer) -> bool:
    """A reply from an agent that left its node (a gateway's proxy, an agent closed while its handler
    ran) after the request reached it: the request went to that agent at that node, so it is its."""
    if msg.type != "result":
        return False
    pending = engine.requests.pending.get((msg.target, msg.correlation_id))
    return pending is not None and pending.node_id == peer.node_id and pending.message.target == msg.sender
