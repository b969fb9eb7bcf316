"""The GenericAgent bridge: each sub-agent folder ``ROOT/temp/NAME/`` of a
GenericAgent checkout is mesh agent ``NAME``, driven over GenericAgent's
own file protocol, as its master would drive it."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable

from .._wire.names import check_agent_id
from ..agent import Agent
from ..errors import AgentExists, InvalidMessage, ZmeshError
from ..message import Message
from ..node import Node
from . import _files as files
from ._process import find_subagents
from ._subagent import State, SubAgent

__all__ = ["GABridge", "TASK_TOPIC", "CONTROL_TOPICS", "STATUS_TOPIC", "LAUNCH_TOPIC", "CAPABILITY"]

log = logging.getLogger("zmesh.ga")

#: A request on this topic is the sub-agent's next round; the reply is the round's text.
TASK_TOPIC = "task"
#: Messages on these write ``_stop``, ``_keyinfo`` and ``_intervene``.
CONTROL_TOPICS = ("stop", "keyinfo", "intervene")
#: A request on this topic answers the folder's state: ``state``, ``pid``, ``round``, ``queued``, ``spawnable``.
STATUS_TOPIC = "status"
#: The bridge's own agent: a request ``{"name": NAME, "input": TEXT}`` starts a new sub-agent.
LAUNCH_TOPIC = "launch"
#: Every sub-agent the bridge exposes has this capability.
CAPABILITY = "genericagent"


def _text(payload: Any, what: str) -> str:
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("text"), str):
        return str(payload["text"])
    raise InvalidMessage(f"{what} takes text: a string, or {{\"text\": ...}}; got {type(payload).__name__}")


def _folder_name(name: object) -> str:
    check_agent_id(name)
    assert isinstance(name, str)
    if "/" in name or "\\" in name or name.startswith("~"):
        raise InvalidMessage(f"a sub-agent's name is a folder name: no '/', '\\\\' or leading '~', got {name!r}")
    return name


class GABridge:
    """Expose the sub-agents of the GenericAgent checkout at ``root`` (the folder
    holding ``agentmain.py``) on ``node``.

    A folder with a running sub-agent is adopted; with ``spawn`` (True: any
    folder; or the names of those that may) a request to a folder with no
    running process launches one, ``python root/agentmain.py --task NAME
    --input TEXT`` with ``launch_args`` added, as GenericAgent's master does.
    Agents are named ``prefix + NAME``; the bridge's own agent
    (``bridge_agent``, None for none) takes ``launch`` requests. ``poll``:
    seconds between looks at a running round's output; ``scan_interval``:
    between looks for folders and processes (and at whether a running
    round's process still lives); ``max_queued``: requests that may wait
    behind a running round (more get :class:`~zmesh.Backpressure`).
    """

    def __init__(self, node: Node, root: str | os.PathLike[str], *, spawn: bool | Iterable[str] = False,
                 prefix: str = "", bridge_agent: str | None = "ga-bridge", python: str = sys.executable,
                 launch_args: Iterable[str] = (), poll: float = 0.1, scan_interval: float = 1.0,
                 max_queued: int = 8, launch_timeout: float = 60.0) -> None:
        self.root = Path(root).absolute()
        if not (self.root / "agentmain.py").is_file():
            raise FileNotFoundError(f"{self.root} holds no agentmain.py: give the GenericAgent checkout's folder")
        for what, value in (("poll", poll), ("scan_interval", scan_interval), ("launch_timeout", launch_timeout)):
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
        if max_queued.__class__ is not int or max_queued < 0:
            raise ValueError(f"max_queued must be an int of 0 or more, got {max_queued!r}")
        if bridge_agent is not None:
            check_agent_id(prefix + bridge_agent)
        self.node = node
        self.prefix = prefix
        self._spawn_all = spawn is True
        self._spawn_names = frozenset() if isinstance(spawn, bool) else frozenset(spawn)
        self._bridge_agent_id = None if bridge_agent is None else prefix + bridge_agent
        self._options: dict[str, Any] = {"python": python, "launch_args": tuple(launch_args), "poll": poll,
                                         "check_every": scan_interval, "max_queued": max_queued,
                                         "launch_timeout": launch_timeout}
        self._scan_interval = scan_interval
        self._subagents: dict[str, SubAgent] = {}
        self._agents: dict[str, Agent] = {}
        self._skipped: dict[str, str] = {}
        self._bridge_agent: Agent | None = None
        self._task: asyncio.Task[None] | None = None

    def may_spawn(self, name: str) -> bool:
        return self._spawn_all or name in self._spawn_names

    async def __aenter__(self) -> GABridge:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        """Register what is there now, then keep looking every ``scan_interval``."""
        if self._bridge_agent_id is not None:
            self._bridge_agent = self.node.agent(self._bridge_agent_id, capabilities=(CAPABILITY + ".launch",))
            self._bridge_agent.add_handler(LAUNCH_TOPIC, self._on_launch)
            self._bridge_agent.add_handler(STATUS_TOPIC, self._on_list)
        await self.scan()
        self._task = asyncio.get_running_loop().create_task(self._scan_forever())

    async def close(self) -> None:
        """Leave the mesh. Sub-agent processes keep running: a new bridge adopts them."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for agent in [*self._agents.values(), *([self._bridge_agent] if self._bridge_agent else [])]:
            await agent.close()
        self._agents.clear()
        self._bridge_agent = None

    def stats(self) -> dict[str, Any]:
        """Every folder known, its state; the folders skipped and why; counts of what happened."""
        counts: dict[str, int] = {}
        for sub in self._subagents.values():
            for key, value in sub.counts.items():
                counts[key] = counts.get(key, 0) + value
        return {"root": str(self.root), "agents": sorted(self._agents),
                "folders": {name: sub.status() for name, sub in sorted(self._subagents.items())},
                "skipped": dict(self._skipped), "counts": counts}

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(self._scan_interval)
            try:
                await self.scan()
            except OSError as exc:  # the root went away, a folder vanished mid-look: say so, look again later
                log.warning("zmesh.ga: looking at %s failed: %s", self.root, exc)

    def _folders(self) -> list[str]:
        temp = self.root / "temp"
        try:
            return sorted(entry.name for entry in os.scandir(temp)
                          if entry.is_dir() and files.is_subagent_folder(Path(entry.path)))
        except FileNotFoundError:
            return []

    async def scan(self) -> None:
        """One look at the folders and the processes: adopt, register, leave."""
        running = await asyncio.to_thread(find_subagents, self.root)
        names = set(self._folders()) | set(running)
        for name in names - set(self._subagents) - set(self._skipped):
            try:
                _folder_name(name)
            except InvalidMessage as exc:
                self._skipped[name] = str(exc)
                log.warning("zmesh.ga: folder %r is not exposed: %s", name, exc)
                continue
            self._subagents[name] = SubAgent(self.root, name, spawnable=self.may_spawn(name), **self._options)
        for name, sub in list(self._subagents.items()):
            if not sub.busy:
                sub.observe(running.get(name))
            await self._expose(name, sub, present=name in names)
        for name in [n for n, sub in self._subagents.items() if n not in names and not sub.busy
                     and sub.state is State.ABSENT and n not in self._agents]:
            del self._subagents[name]  # the folder is gone

    async def _expose(self, name: str, sub: SubAgent, present: bool) -> None:
        """Registered while a process runs it, or it may be launched and its folder is there."""
        wanted = sub.busy or sub.pid is not None or (sub.spawnable and present)
        agent = self._agents.get(name)
        if wanted and agent is None:
            self._register(name, sub)
        elif not wanted and agent is not None:
            del self._agents[name]
            await agent.close()
            log.info("zmesh.ga: sub-agent %r ended; it left the mesh", name)

    def _register(self, name: str, sub: SubAgent) -> Agent | None:
        try:
            agent = self.node.agent(self.prefix + name, capabilities=(CAPABILITY,))
        except (AgentExists, InvalidMessage) as exc:
            self._skipped[name] = str(exc)
            log.warning("zmesh.ga: folder %r is not exposed: %s", name, exc)
            return None

        async def task(msg: Message) -> str:
            return await sub.ask(_text(msg.payload, "a task"))

        async def status(msg: Message) -> dict[str, Any]:
            return sub.status()

        agent.add_handler(TASK_TOPIC, task)
        agent.add_handler(STATUS_TOPIC, status)
        for kind in CONTROL_TOPICS:
            agent.add_handler(kind, self._control(sub, kind))
        self._agents[name] = agent
        return agent

    @staticmethod
    def _control(sub: SubAgent, kind: str) -> Any:
        async def control(msg: Message) -> dict[str, Any]:
            return sub.control(kind, "" if kind == "stop" and msg.payload is None else _text(msg.payload, kind))
        return control

    async def _on_launch(self, msg: Message) -> str:
        payload = msg.payload
        if not isinstance(payload, dict) or not isinstance(payload.get("input"), str):
            raise InvalidMessage('launch takes {"name": NAME, "input": TEXT}')
        name = _folder_name(payload.get("name"))
        if not self.may_spawn(name):
            raise InvalidMessage(f"this bridge may not launch sub-agent {name!r} (--spawn)")
        sub = self._subagents.get(name)
        if sub is None:
            sub = self._subagents[name] = SubAgent(self.root, name, spawnable=True, **self._options)
        if name not in self._agents and self._register(name, sub) is None:
            raise ZmeshError(self._skipped[name])
        return await sub.ask(payload["input"])

    async def _on_list(self, msg: Message) -> dict[str, Any]:
        return self.stats()
