"""zmesh over a broker: the same zmesh roles as ``zmesh`` (bench/systems/zmesh_mesh.py),
each node's ``transport=`` the URL of a broker the bench starts, so a user sees what
the zmesh API costs over each transport beside that broker's raw client.

* ``zmesh-nats``, ``zmesh-nats-qos1``: nats-server with JetStream (``-js``: zmesh keeps
  the mesh's membership in a key-value bucket, and QoS 1 in a stream); compare with
  ``nats`` and ``jetstream``.
* ``zmesh-mqtt``, ``zmesh-mqtt-qos1``: mosquitto; compare with ``mqtt`` and ``mqtt-qos1``.
* ``zmesh-redis``, ``zmesh-redis-qos1``: redis-server (QoS 1 through a stream per agent);
  compare with ``redis``.
* ``zmesh-file``: the file bus in a temporary directory (no server; inotify).

A QoS 1 one-way run ends when ``node.wait_acked()`` returns (the broker has confirmed
every message) or at the sink's n-th envelope, whichever is later, as for ``zmesh-qos1``.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

from ..harness import HOST
from . import zmesh_mesh
from .base import module_available
from .mqtt import Mqtt
from .nats import Nats
from .redis_pubsub import RedisPubSub

__all__ = ["ZmeshFile", "ZmeshMqtt", "ZmeshMqttQos1", "ZmeshNats", "ZmeshNatsQos1", "ZmeshRedis", "ZmeshRedisQos1",
           "peer"]

peer = zmesh_mesh.peer  # the zmesh roles, with args["transport"] set


class _OverBroker:
    """What the zmesh-over-a-broker systems add to the broker's own system."""

    qos: ClassVar[int] = 0
    _server: Any

    def available(self) -> tuple[bool, str]:
        ok, note = module_available("zmesh", "-e .")
        if not ok:
            return ok, note
        return super().available()  # type: ignore[misc]  # the broker's binary and client

    def setup(self) -> None:
        super().setup()  # type: ignore[misc]
        zmesh_mesh.local_env()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), **zmesh_mesh.zmesh_versions()}  # type: ignore[misc]

    def url(self) -> str:
        raise NotImplementedError

    def peer_args(self, workload: str) -> dict[str, Any]:
        return {"workload": workload, "mesh": f"bench-{workload}-{uuid.uuid4().hex[:8]}", "qos": self.qos,
                "transport": self.url()}


class ZmeshNats(_OverBroker, Nats):
    key: ClassVar[str] = "zmesh-nats"
    label: ClassVar[str] = "zmesh over NATS"
    notes: ClassVar[str] = ("zmesh nodes with transport=nats://... (nats-server -js); "
                            "the zmesh roles of `zmesh`, over NATS core")
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt", "fanout"})

    def server_argv(self, port: int, tmp: Path) -> list[str]:
        return [*super().server_argv(port, tmp), "-js", "-sd", str(tmp / "jetstream")]

    def url(self) -> str:
        return f"nats://{HOST}:{self._server.port}"


class ZmeshNatsQos1(ZmeshNats):
    key: ClassVar[str] = "zmesh-nats-qos1"
    label: ClassVar[str] = "zmesh NATS qos=1"
    notes: ClassVar[str] = ("zmesh over NATS with qos=1: one-way messages through JetStream (a stream per "
                            "mesh, a consumer per agent), ends at node.wait_acked()")
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})
    qos: ClassVar[int] = 1


class ZmeshMqtt(_OverBroker, Mqtt):
    key: ClassVar[str] = "zmesh-mqtt"
    label: ClassVar[str] = "zmesh over MQTT"
    notes: ClassVar[str] = "zmesh nodes with transport=mqtt://... (mosquitto); the zmesh roles of `zmesh`, QoS 0"
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt", "fanout"})

    def url(self) -> str:
        return f"mqtt://{HOST}:{self._server.port}"


class ZmeshMqttQos1(ZmeshMqtt):
    key: ClassVar[str] = "zmesh-mqtt-qos1"
    label: ClassVar[str] = "zmesh MQTT qos=1"
    notes: ClassVar[str] = "zmesh over MQTT with qos=1 on every send and request; ends at node.wait_acked()"
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})
    qos: ClassVar[int] = 1


class ZmeshRedis(_OverBroker, RedisPubSub):
    key: ClassVar[str] = "zmesh-redis"
    label: ClassVar[str] = "zmesh over Redis"
    notes: ClassVar[str] = "zmesh nodes with transport=redis://... (redis-server); the zmesh roles of `zmesh`, pub/sub"
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt", "fanout"})

    def url(self) -> str:
        return f"redis://{HOST}:{self._server.port}"


class ZmeshRedisQos1(ZmeshRedis):
    key: ClassVar[str] = "zmesh-redis-qos1"
    label: ClassVar[str] = "zmesh Redis qos=1"
    notes: ClassVar[str] = ("zmesh over Redis with qos=1: one-way messages through a stream per agent "
                            "(XADD, XREADGROUP, XACK), ends at node.wait_acked()")
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})
    qos: ClassVar[int] = 1


class ZmeshFile(zmesh_mesh.ZmeshMesh):
    key: ClassVar[str] = "zmesh-file"
    label: ClassVar[str] = "zmesh file bus"
    notes: ClassVar[str] = ("zmesh nodes with transport=file:///tmp/...: the seed's FileBroker folders, "
                            "a file per message, inotify")
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt", "fanout"})
    _dir: str | None = None

    def setup(self) -> None:
        super().setup()
        self._dir = tempfile.mkdtemp(prefix="zmesh-bench-bus-")

    def teardown(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        super().teardown()

    def peer_args(self, workload: str) -> dict[str, Any]:
        args = super().peer_args(workload)
        assert self._dir is not None, "setup() first"
        return {**args, "transport": Path(self._dir, args["mesh"]).as_uri()}
