"""Registry of benchmarked systems: ``key -> "module:Class"``.

To add a system, write ``bench/systems/<name>.py`` (a :class:`~.base.System`
subclass plus a module-level ``peer(role, args, ctl)``) and add one line here.
Modules are imported lazily, so a missing client library only skips that
system.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .base import System

__all__ = ["BASELINE", "DEFAULT", "REGISTRY", "load_class", "load_module"]

REGISTRY: dict[str, str] = {
    "zmesh": "bench.systems.zmesh_mesh:ZmeshMesh",
    "zmesh-async": "bench.systems.zmesh_mesh:ZmeshAsync",
    "zmesh-qos1": "bench.systems.zmesh_mesh:ZmeshQos1",
    "zmesh-curve": "bench.systems.zmesh_mesh:ZmeshCurve",
    "zmesh-inproc": "bench.systems.zmesh_inproc:ZmeshInproc",
    "zmq": "bench.systems.raw_zmq:RawZmq",
    "zmq-batch32": "bench.systems.raw_zmq:RawZmqBatch",
    "nats": "bench.systems.nats:Nats",
    "mqtt": "bench.systems.mqtt:Mqtt",
    "mqtt-qos1": "bench.systems.mqtt:MqttQos1",
    "jetstream": "bench.systems.jetstream:JetStream",
    "redis": "bench.systems.redis_pubsub:RedisPubSub",
    "redis-plain": "bench.systems.redis_pubsub:RedisPubSubPlain",
    "zmesh-nats": "bench.systems.zmesh_brokers:ZmeshNats",
    "zmesh-nats-qos1": "bench.systems.zmesh_brokers:ZmeshNatsQos1",
    "zmesh-mqtt": "bench.systems.zmesh_brokers:ZmeshMqtt",
    "zmesh-mqtt-qos1": "bench.systems.zmesh_brokers:ZmeshMqttQos1",
    "zmesh-redis": "bench.systems.zmesh_brokers:ZmeshRedis",
    "zmesh-redis-qos1": "bench.systems.zmesh_brokers:ZmeshRedisQos1",
    "zmesh-file": "bench.systems.zmesh_brokers:ZmeshFile",
}

#: Systems run when ``--systems`` is not given (the others run only by name).
DEFAULT: tuple[str, ...] = (
    "zmesh", "zmesh-async", "zmesh-qos1", "zmesh-inproc", "zmq", "zmq-batch32", "nats", "jetstream", "mqtt", "mqtt-qos1", "redis",
)  # fmt: skip

#: The system the table's ratios are relative to.
BASELINE = "zmq"


def load_module(key: str) -> ModuleType:
    """Import the module that implements system *key*."""
    return importlib.import_module(REGISTRY[key].split(":", 1)[0])


def load_class(key: str) -> type[System]:
    """The :class:`System` subclass registered under *key*."""
    cls = getattr(load_module(key), REGISTRY[key].split(":", 1)[1])
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise TypeError(f"{REGISTRY[key]} is not a System")
    return cls
