"""zmesh.sync: the same surface without await; the loop lives on a background thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import threading
from typing import Any, Callable, Iterable, TypeVar

import pytest

import zmesh
import zmesh.sync as zs

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")


def test_blocking_request_delegate_handoff_and_broadcast() -> None:
    with zs.Node("sync-a", transport="inproc") as node:
        a, b, c = node.agent("a"), node.agent("b"), node.agent("c", capabilities=("double",))
        loop_thread = node._loop.thread

        @c.on("double")
        def double(msg: zmesh.Message) -> int:
            assert threading.current_thread() is not loop_thread  # plain handlers run in the pool
            return int(msg.payload) * 2

        @b.on("double")
        def via_c(msg: zmesh.Message) -> int:
            # a blocking call from inside a handler must not deadlock the node
            return int(b.delegate("c", msg, timeout=5).payload) + 1

        assert a.request("b", "double", 20, timeout=5).payload == 41
        assert node.registry.find("double") == ["c"]

        got: list[object] = []
        c.subscribe("news.*", lambda msg: got.append(msg.payload))
        assert a.broadcast("news.today", "hello") == 1

        @b.on_handoff
        def take(offer: zmesh.Handoff) -> bool:
            return offer.task_id == "t-1"

        assert a.handoff("b", "t-1", {"x": 1}, timeout=5).accepted is True
        assert b.tasks == frozenset({"t-1"}) and a.tasks == frozenset()
        assert a.handoff("b", "t-2", timeout=5).accepted is False
        assert a.tasks == frozenset({"t-2"})
        node.wait_until(lambda: got == ["hello"], 5, "the broadcast's handler, in a pool thread")


def test_errors_surface_as_zmesh_errors() -> None:
    clock = zmesh.FakeClock()
    with zs.Node("sync-b", transport="inproc", clock=clock) as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("boom", lambda msg: 1 / 0)
        with pytest.raises(zmesh.HandlerError) as info:
            a.request("b", "boom", timeout=5)  # the fake clock never moves: an answer comes at once
        assert info.value.remote_type == "ZeroDivisionError"
        with pytest.raises(zmesh.AgentNotRegistered):
            a.send("nobody", "x")
        assert [d.reason for d in node.dead_letters] == ["handler_error", "not_found"]
        with pytest.raises(zmesh.AgentExists):
            node.agent("a")


def test_calling_from_the_nodes_own_loop_is_refused_not_deadlocked() -> None:
    with zs.Node("sync-c", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")

        async def from_the_loop(msg: zmesh.Message) -> list[str]:
            said = []
            for call in (lambda: a.send("b", "x"), node.close):  # close() too: it used to stop the loop under us
                try:
                    call()
                    said.append("no error")
                except RuntimeError as exc:
                    said.append(str(exc))
            return said

        b.add_handler("probe", from_the_loop)
        said, closing = a.request("b", "probe", timeout=5).payload
        assert said.startswith("zmesh.sync.Agent.send called from the node's own event loop thread"), said
        assert "`await agent.async_agent.send(...)`" in said and "worker thread, where the sync API works" in said
        assert closing.startswith("zmesh.sync.Node.close called from") and "`await node.async_node.close(...)`" in closing
        assert a.request("b", "probe", timeout=5).payload[0] == said  # the node still works
        assert node.stats()["node_id"] == node.id  # a plain call on the async side: no wait, no refusal


def test_close_stops_the_loop_thread_and_the_pool() -> None:
    before = set(threading.enumerate())
    node = zs.Node("sync-d", transport="inproc")
    node.agent("a").add_handler("x", lambda msg: None)
    node.close()
    node.close()  # idempotent
    assert set(threading.enumerate()) <= before
    with pytest.raises(zmesh.NodeClosed):
        node.agent("late")


def test_peer_stats_without_await() -> None:
    with zs.Node("sync-stats", name="one", transport="inproc") as one, \
            zs.Node("sync-stats", name="two", transport="inproc") as two:
        worker = two.agent("worker")
        worker.add_handler("job", lambda msg: msg.payload)
        caller = one.agent("caller")
        one.wait_for_agents("worker")
        for i in range(3):
            caller.request("worker", "job", i, timeout=5)
        stats = one.peer_stats("two")
        assert stats["node_id"] == "two" and stats["by_agent"]["worker"]["handled"] == 3
        assert stats["by_agent"] == two.stats()["by_agent"]


# -- the same surface as zmesh.Node and zmesh.Agent ----------------------------

#: Dunder names that are part of a class's public surface (how it is made and
#: entered); every other public name has no leading underscore.
PROTOCOL_NAMES = frozenset({"__init__", "__enter__", "__exit__", "__aenter__", "__aexit__", "__iter__", "__aiter__"})

#: Public names of zmesh.Node / zmesh.Agent that the sync twin lacks on purpose.
ASYNC_ONLY: dict[tuple[type, str], str] = {
    (zmesh.Node, "__aenter__"): "`async with`: the sync node is entered with plain `with` (__enter__)",
    (zmesh.Node, "__aexit__"): "`async with`: the sync node is left with plain `with` (__exit__)",
    (zmesh.Node, "events"): "an async iterator: iterate node.async_node.events() in async code on the loop",
    (zmesh.Agent, "handler_entry"): "the dispatcher's lookup (handler, where it runs); handler_for is the public one",
}

#: Public names only the sync twin has.
SYNC_ONLY: dict[tuple[type, str], str] = {
    (zs.Node, "__enter__"): "`with` instead of `async with`",
    (zs.Node, "__exit__"): "`with` instead of `async with`",
    (zs.Node, "async_node"): "the asyncio node underneath, for async def handlers",
    (zs.Agent, "async_agent"): "the asyncio agent underneath, for async def handlers",
}

#: Parameters that differ on purpose: (async class, method) -> {parameter: why}.
#: A parameter named here is left out on both sides; "*" leaves out all of them.
DIFFERENT_PARAMETERS: dict[tuple[type, str], dict[str, str]] = {
    (zmesh.Node, "__init__"): {
        "handler_threads": "sync only: the pool that runs the sync node's plain def handlers",
    },
    (zmesh.Agent, "__init__"): {
        "*": "agents are made by node.agent(), never directly; the sync one wraps the async one",
    },
}


def class_names(cls: type) -> dict[str, object]:
    """The methods and properties a user reaches on ``cls``, as stored on it."""
    found: dict[str, object] = {}
    for name in dir(cls):
        if name.startswith("_") and name not in PROTOCOL_NAMES:
            continue
        member = inspect.getattr_static(cls, name)
        if name in PROTOCOL_NAMES and member is getattr(object, name, None):
            continue  # object's own __init__: nothing this class offers
        if isinstance(member, property) or inspect.isfunction(member):
            found[name] = member
    return found


def attribute_names(instance: object) -> set[str]:
    """Public attributes set on the instance (``id``, ``mesh``...), invisible on its class."""
    return {name for name in vars(instance) if not name.startswith("_")}


def parameters(fn: Any, leave_out: Iterable[str]) -> list[tuple[str, str, object]]:
    """(name, kind, default) of each parameter but ``self`` and those left out."""
    skip = set(leave_out)
    listed = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind.name, p.default) for p in listed if p.name not in skip]


def differences(async_obj: object, sync_obj: object) -> list[str]:
    """Where the sync object's public surface is not the async one's, but for the allow-lists."""
    async_cls, sync_cls = type(async_obj), type(sync_obj)
    async_names, sync_names = class_names(async_cls), class_names(sync_cls)
    async_attributes = attribute_names(async_obj)
    found: list[str] = []
    for name in sorted(async_attributes - set(async_names)):
        if (async_cls, name) not in ASYNC_ONLY and not hasattr(sync_obj, name):
            found.append(f"zmesh.sync.{sync_cls.__name__}.{name} is missing (an attribute of the async one)")
    for name, member in sorted(async_names.items()):
        where = f"zmesh.sync.{sync_cls.__name__}.{name}"
        twin = sync_names.get(name)
        if (async_cls, name) in ASYNC_ONLY:
            continue
        if twin is None:
            found.append(f"{where} is missing")
        elif isinstance(member, property):
            if not isinstance(twin, property):
                found.append(f"{where} is not a property")
            elif (member.fset is None) != (twin.fset is None):
                found.append(f"{where}: settable is {twin.fset is not None}, async {member.fset is not None}")
        elif not inspect.isfunction(twin):
            found.append(f"{where} is not a method")
        else:
            allowed = DIFFERENT_PARAMETERS.get((async_cls, name), {})
            if "*" not in allowed and parameters(twin, allowed) != parameters(member, allowed):
                found.append(f"{where}{inspect.signature(twin)}\n    async: {inspect.signature(member)}")
    for name in sorted(set(sync_names) - set(async_names) - async_attributes):
        if (sync_cls, name) not in SYNC_ONLY:
            found.append(f"zmesh.sync.{sync_cls.__name__}.{name} has no async counterpart and no reason in SYNC_ONLY")
    return found


def test_every_method_and_property_takes_the_same_parameters_as_the_async_one() -> None:
    """Compared by inspect, so a parameter or method added to zmesh.Node or
    zmesh.Agent fails here until the sync twin has it too."""
    async_node = zmesh.Node("surface", transport="inproc")  # never started: nothing to close
    with zs.Node("surface", transport="inproc") as node:
        found = differences(async_node, node) + differences(async_node.agent("a"), node.agent("a"))
    assert not found, "zmesh.sync differs from zmesh:\n  " + "\n  ".join(found)


def test_the_allow_lists_name_only_what_exists() -> None:
    """A stale entry would excuse nothing, or hide a name that came back."""
    async_node = zmesh.Node("allowed", transport="inproc")
    instances: dict[type, object] = {zmesh.Node: async_node, zmesh.Agent: async_node.agent("a")}
    for (cls, name), why in {**ASYNC_ONLY, **SYNC_ONLY}.items():
        on_instance = cls in instances and name in attribute_names(instances[cls])
        assert why and (name in class_names(cls) or on_instance), (cls, name)
    twins = {zmesh.Node: zs.Node, zmesh.Agent: zs.Agent}
    for (cls, name), allowed in DIFFERENT_PARAMETERS.items():
        named = set(inspect.signature(getattr(cls, name)).parameters)
        named |= set(inspect.signature(getattr(twins[cls], name)).parameters)
        assert all(allowed.values()) and set(allowed) <= named | {"*"}, (cls, name, allowed)


# -- every argument reaches the async call ----------------------------------


class Sentinel:
    """A distinct stand-in for one argument, to see where it arrives."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


def sentinel_arguments(fn: Any, leave_out: Iterable[str] = ()) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(args, kwargs) giving every parameter of ``fn`` but ``self`` a sentinel,
    and what each parameter then holds (by name)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    holds: dict[str, Any] = {}
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        if p.name in leave_out or p.kind is p.VAR_KEYWORD:
            continue
        value = Sentinel(p.name)
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = holds[p.name] = value
        elif p.kind is p.VAR_POSITIONAL:  # two, so that passing on only the first shows
            more = (value, Sentinel(f"{p.name}[1]"))
            args += more
            holds[p.name] = more
        else:
            args.append(value)
            holds[p.name] = value
    return args, kwargs, holds


class Recorder:
    """Stands in for a zmesh.Node or zmesh.Agent: records each call's arguments by parameter name."""

    def __init__(self, real: type) -> None:
        self._real = real
        self.calls: dict[str, dict[str, Any]] = {}
        self.id = "recorded"
        self.closed = False

    def record(self, name: str, args: Any, kwargs: Any) -> Recorder:
        bound = inspect.signature(getattr(self._real, name)).bind(self, *args, **kwargs).arguments
        self.calls[name] = {key: value for key, value in bound.items() if key != "self"}
        return self  # what node.agent() returns: the sync node wraps it

    def __getattr__(self, name: str) -> Any:
        if inspect.iscoroutinefunction(getattr(self._real, name)):
            async def record_async(*args: Any, **kwargs: Any) -> Recorder:
                return self.record(name, args, kwargs)

            return record_async
        return lambda *args, **kwargs: self.record(name, args, kwargs)


#: Sync methods the forwarding test does not call, with why.
NOT_FORWARDED: dict[tuple[type, str], str] = {
    (zs.Node, "__init__"): "tested on its own: it makes the async node",
    (zs.Node, "__enter__"): "no async counterpart",
    (zs.Node, "__exit__"): "no async counterpart",
    (zs.Node, "close"): "stops the loop thread; tested with the real node",
    (zs.Agent, "__init__"): "wraps the async agent it is given",
    (zs.Agent, "on"): "a decorator: what it decorates goes through add_handler",
}


def forwarding_differences(sync_obj: object, recorder: Recorder) -> list[str]:
    found = []
    for name, member in class_names(type(sync_obj)).items():
        if isinstance(member, property) or (type(sync_obj), name) in NOT_FORWARDED:
            continue
        args, kwargs, holds = sentinel_arguments(member)
        getattr(sync_obj, name)(*args, **kwargs)
        if recorder.calls.get(name) != holds:
            found.append(f"{type(sync_obj).__name__}.{name}: gave {holds}, the async one got {recorder.calls.get(name)}")
    return found


def test_every_argument_reaches_the_async_method_under_its_own_name() -> None:
    """Explicit parameters are only as good as their forwarding: a swapped or
    dropped keyword shows here, for every method, with no list to keep."""
    with zs.Node("forwarding", transport="inproc") as node:
        real_node, node._node = node._node, Recorder(zmesh.Node)  # type: ignore[assignment]
        try:
            found = forwarding_differences(node, node._node)  # type: ignore[arg-type]
        finally:
            node._node = real_node
        recorder = Recorder(zmesh.Agent)
        twin = zs.Agent(node, recorder, node._loop, node._wait, node._wrap_handler)  # type: ignore[arg-type]
        found += forwarding_differences(twin, recorder)
    assert not found, "\n".join(found)


def test_every_constructor_argument_reaches_the_async_node(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Recorder] = []

    def record_node(*args: Any, **kwargs: Any) -> Recorder:
        made.append(Recorder(zmesh.Node))
        return made[-1].record("__init__", args, kwargs)

    monkeypatch.setattr(zmesh.node, "Node", record_node)
    args, kwargs, holds = sentinel_arguments(zs.Node.__init__, leave_out={"handler_threads"})
    with zs.Node(*args, **kwargs, handler_threads=1):
        pass
    assert made[0].calls["__init__"] == holds
    assert set(made[0].calls) == {"__init__", "start", "close"}


# -- what runs where, and what may be called from there ---------------------


_handler_calls = itertools.count()


def call_from(handler_kind: str, node: zs.Node, fn: Callable[[], T]) -> T:
    """``fn()`` called inside a handler of ``handler_kind`` on ``node``; what it returned or raised."""
    n = next(_handler_calls)
    a, b = node.agent(f"caller-{n}"), node.agent(f"callee-{n}")
    outcome: list[Any] = []

    def run(msg: zmesh.Message) -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:
            outcome.append(exc)

    async def run_async(msg: zmesh.Message) -> None:
        run(msg)

    b.add_handler("run", run_async if handler_kind == "async" else run, inline=handler_kind == "inline")
    a.request(b.id, "run", timeout=10)
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("handler_kind", ["async", "inline"])
def test_every_waiting_call_from_the_loop_thread_raises_what_to_do_instead(handler_kind: str) -> None:
    """Every sync method whose async namesake is a coroutine waits; on the loop
    thread it raises at once, naming itself and the async call to make."""
    with zs.Node("sync-misuse", transport="inproc") as node:
        agent = node.agent("x")
        waiting: list[tuple[object, str]] = [(node.dead_letters, "redeliver")]
        for async_cls, obj in ((zmesh.Node, node), (zmesh.Agent, agent)):
            waiting += [(obj, name) for name, fn in class_names(async_cls).items()
                        if inspect.iscoroutinefunction(fn) and (async_cls, name) not in ASYNC_ONLY]

        def call_every_waiting_one() -> dict[str, str]:
            said: dict[str, str] = {}
            for obj, name in waiting:
                args, kwargs, _ = sentinel_arguments(getattr(type(obj), name))
                api = f"{type(obj).__name__}.{name}"
                try:
                    getattr(obj, name)(*args, **kwargs)
                    said[api] = "no error"
                except RuntimeError as exc:
                    said[api] = str(exc)
            return said

        said = call_from(handler_kind, node, call_every_waiting_one)
        assert len(said) == len(waiting) > 15
        twin = {"Node": "node.async_node", "Agent": "agent.async_agent", "DeadLetters": "node.async_node.dead_letters"}
        for api, message in said.items():
            assert message.startswith(f"zmesh.sync.{api} called from the node's own event loop thread"), message
            owner, method = api.split(".")
            assert f"`await {twin[owner]}.{method}(...)`" in message and "worker thread" in message, message
        # What is a plain call on the async side never waits: it works on the loop thread too.
        made = call_from(handler_kind, node, lambda: (node.stats()["node_id"], node.agent(f"made-{handler_kind}").id))
        assert made == (node.id, f"made-{handler_kind}")
        assert call_from(handler_kind, node, lambda: "still works") == "still works"
    assert node.closed


def test_a_waiting_call_from_another_running_event_loop_warns_that_it_blocks_it() -> None:
    with zs.Node("sync-other-loop", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("echo", lambda msg: msg.payload)

        async def users_own_asyncio_code() -> Any:
            with pytest.warns(zs.BlockingCallWarning, match="zmesh.sync.Agent.request called from a running") as got:
                reply = a.request("b", "echo", 7, timeout=5)
            assert got[0].filename == __file__  # points at the call, not into zmesh
            assert node.stats()["node_id"] == node.id  # no wait for the mesh, no warning (warnings are errors)
            return reply.payload

        assert asyncio.run(users_own_asyncio_code()) == 7


def test_inline_handlers_run_on_the_loop_thread_others_in_the_pool() -> None:
    with zs.Node("sync-inline", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")
        ran_in: dict[str, threading.Thread] = {}

        @b.on("quick", inline=True)
        def quick(msg: zmesh.Message) -> int:
            ran_in["on"] = threading.current_thread()
            return int(msg.payload) + 1

        def slow(msg: zmesh.Message) -> None:
            ran_in["pool"] = threading.current_thread()

        async def on_the_loop(msg: zmesh.Message) -> None:  # where an async def handler runs: the loop thread
            ran_in["loop"] = threading.current_thread()

        b.add_handler("slow", slow)
        b.add_handler("loop", on_the_loop)
        b.subscribe("news.*", lambda msg: ran_in.setdefault("subscribe", threading.current_thread()), inline=True)
        assert a.request("b", "quick", 1, timeout=5).payload == 2
        a.request("b", "slow", timeout=5)
        a.request("b", "loop", timeout=5)
        assert a.broadcast("news.today") == 1
        node.wait_until(lambda: "subscribe" in ran_in, 5, "the broadcast to be handled")
        assert ran_in["on"] is ran_in["loop"] and ran_in["subscribe"] is ran_in["loop"]
        assert ran_in["pool"] is not ran_in["loop"] and ran_in["loop"] is not threading.current_thread()
        assert b.handler_for("quick") is quick and b.handler_for("slow") is slow  # what was given, not a wrapper


def test_a_plain_handler_sees_its_messages_trace_id_as_under_the_async_node() -> None:
    with zs.Node("sync-trace", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("which", lambda msg: [zmesh.current_trace_id(), msg.trace_id])
        current, carried = a.request("b", "which", timeout=5).payload
        assert carried and current == carried


def test_a_plain_handler_may_close_its_own_node() -> None:
    node = zs.Node("sync-self-close", transport="inproc")
    a, b = node.agent("a"), node.agent("b")
    outcome: list[str] = []
    finished = threading.Event()

    def close_my_node(msg: zmesh.Message) -> None:
        try:
            node.close()
            outcome.append("closed")
        except BaseException as exc:
            outcome.append(repr(exc))
        finished.set()

    b.add_handler("close", close_my_node)
    a.send("b", "close")
    assert finished.wait(10)
    assert outcome == ["closed"] and node.closed
    assert not [t for t in threading.enumerate() if t.name == "zmesh-loop-sync-self-close"]  # close() joined it


def test_a_call_still_waiting_when_the_node_closes_gets_node_closed() -> None:
    node = zs.Node("sync-close-while-waiting", transport="inproc")
    a, b = node.agent("a"), node.agent("b")
    polled = threading.Event()
    outcome: list[BaseException] = []

    def wait_for_ever(msg: zmesh.Message) -> None:
        try:
            node.wait_until(lambda: polled.set() or False, 60, "what never happens")
        except BaseException as exc:
            outcome.append(exc)

    b.add_handler("wait", wait_for_ever)
    a.send("b", "wait")
    assert polled.wait(10)  # the handler's thread now waits for the loop
    node.close()  # returns: that thread was told, it did not wait out its 60 s (nor for ever)
    assert len(outcome) == 1 and isinstance(outcome[0], zmesh.NodeClosed), outcome


# -- capabilities ------------------------------------------------------------


def test_capabilities_assigned_on_the_sync_agent_go_to_the_async_one() -> None:
    with zs.Node("sync-caps", transport="inproc") as node:
        agent = node.agent("a", capabilities=["old"])
        agent.capabilities = ["summarise", "translate"]
        assert agent.capabilities == agent.async_agent.capabilities == ("summarise", "translate")


def test_capabilities_assigned_on_the_sync_agent_are_republished() -> None:
    setter = getattr(inspect.getattr_static(zmesh.Agent, "capabilities", None), "fset", None)
    if setter is None:
        pytest.skip("zmesh.Agent.capabilities has no property setter yet (it republishes the record); "
                    "the sync setter forwards to it")
    with zs.Node("sync-caps-mesh", name="one", transport="inproc") as one, \
            zs.Node("sync-caps-mesh", name="two", transport="inproc") as two:
        agent = one.agent("a", capabilities=["old"])
        two.wait_for_agents("a")
        agent.capabilities = ["new"]
        two.wait_until(lambda: two.registry.find("new") == ["a"], 10, "the new capabilities to arrive")
        assert two.registry.find("old") == []


def test_a_plain_handler_runs_as_many_calls_at_once_as_its_agents_concurrency() -> None:
    concurrency = 40  # more than any default pool: each agent has threads of its own
    barrier = threading.Barrier(concurrency, timeout=10)
    with zs.Node("sync-pool", transport="inproc") as node:
        a, worker = node.agent("a"), node.agent("w", concurrency=concurrency)
        worker.add_handler("llm.call", lambda msg: barrier.wait())  # a sync SDK call, waiting on the network
        with concurrent.futures.ThreadPoolExecutor(concurrency) as callers:
            replies = list(callers.map(lambda _: a.request("w", "llm.call", timeout=20), range(concurrency)))
        assert sorted(r.payload for r in replies) == list(range(concurrency))
