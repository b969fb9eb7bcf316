"""Large frames over ZeroMQ: what arrives is what was sent, a large body is
handed on as a view of ZeroMQ's buffer (not copied), and glibc's allocator is
tuned once a process moves one (zmesh/transport/zmq/_allocator.py)."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import zmesh
from tests.helpers import Mesh
from zmesh._wire import codec
from zmesh.errors import FrameError
import zmesh.transport.zmq as zmq_transport
from zmesh.transport.zmq import _allocator, _link, _receive

pytestmark = [pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent
BIG = 1 << 20
GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


class Calls:
    """Counts the calls of ``large_frame`` made from each module that may make one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by: dict[str, int] = {"receive": 0, "link": 0, "publish": 0}
        for name, module in (("receive", _receive), ("link", _link), ("publish", zmq_transport)):
            monkeypatch.setattr(module, "large_frame", self._counter(name))

    def _counter(self, name: str) -> Any:
        def large_frame(size: int) -> None:
            assert size >= _allocator.LARGE_FRAME
            self.by[name] += 1
        return large_frame


async def test_a_large_message_reply_and_broadcast_arrive_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    blob = os.urandom(BIG)
    async with Mesh("zmq", max_payload=2 * BIG) as m:
        a = await m.node(name="a")
        b = await m.node(name="b")
        got: asyncio.Queue[zmesh.Message] = asyncio.Queue()
        sink = b.agent("sink")
        sink.add_handler("blob", got.put_nowait, inline=True)
        sink.add_handler("echo", lambda msg: msg.payload, inline=True)
        await sink.subscribe("news")
        src = a.agent("src")
        await m.converged(10)
        await src.send("sink", "blob", {"blob": blob, "n": 1})
        assert (await asyncio.wait_for(got.get(), 10)).payload == {"blob": blob, "n": 1}
        assert calls.by["link"] >= 1 and calls.by["receive"] >= 1
        reply = await src.request("sink", "echo", blob, timeout=10)
        assert reply.payload == blob
        news: asyncio.Queue[zmesh.Message] = asyncio.Queue()
        sink.add_handler("news", news.put_nowait, inline=True)
        await src.broadcast("news", blob)
        assert (await asyncio.wait_for(news.get(), 10)).payload == blob
        assert calls.by["publish"] >= 1
        small = dict(calls.by)
        await src.send("sink", "blob", "small")
        assert (await asyncio.wait_for(got.get(), 10)).payload == "small"
        assert calls.by == small  # a short frame takes the ordinary path


def test_a_view_decodes_as_the_bytes_do() -> None:
    good = [0, "id"]
    frame = codec.join_frame([b"\x92\x00\xa2id", b"\xc1"])  # a good item, then one that is not msgpack
    as_bytes = codec.decode_frame(frame, 1 << 20)
    assert codec.decode_frame(memoryview(frame), 1 << 20) == as_bytes
    assert as_bytes[0] == good and as_bytes[1][0] == codec.BAD
    with pytest.raises(FrameError):
        codec.decode_frame(memoryview(frame), 4)  # oversized


def _tuned_after(size: int, max_payload: int = 2 << 20, **env: str) -> str:
    script = (
        "import asyncio, os, zmesh\n"
        "from zmesh.transport.zmq import _allocator\n"
        "async def main():\n"
        f"    kw = dict(interfaces='local', discovery=False, max_payload={max_payload})\n"
        "    async with zmesh.Node('large', name='a', **kw) as a, "
        "zmesh.Node('large', name='b', seeds=[a.endpoint], **kw) as b:\n"
        "        got = asyncio.Event()\n"
        "        a.agent('sink').add_handler('x', lambda m: got.set(), inline=True)\n"
        "        await b.wait_for_agents('sink', timeout=10)\n"
        f"        await b.agent('src').send('sink', 'x', b'.' * {size})\n"
        "        await asyncio.wait_for(got.wait(), 10)\n"
        "    print(_allocator.tuned())\n"
        "asyncio.run(main())\n"
    )
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               "ZMESH_INTERFACES": "127.0.0.1", **env}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        if name not in env:
            environ.pop(name, None)
    done = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=40)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="the allocator is tuned on glibc only")
def test_the_allocator_is_tuned_once_a_large_frame_moves_and_not_before() -> None:
    assert _tuned_after(2 * _allocator.LARGE_FRAME) == str(_allocator.MIN_MMAP_THRESHOLD)
    assert _tuned_after(1000) == "0"
    assert _tuned_after(2 * _allocator.LARGE_FRAME, ZMESH_MALLOC_TUNE="0") == "0"
    assert _tuned_after(2 * _allocator.LARGE_FRAME, MALLOC_TRIM_THRESHOLD_="1048576") == "0"


@pytest.mark.skipif(not GLIBC, reason="the allocator is tuned on glibc only")
def test_the_thresholds_follow_the_largest_frame_up_to_a_cap() -> None:
    threshold = int(_tuned_after(6 << 20, max_payload=16 << 20))
    assert 2 * (6 << 20) < threshold < 2 * ((6 << 20) + 1024)  # twice the frame: the payload and its envelope
    assert _tuned_after(20 << 20, max_payload=32 << 20) == str(_allocator.MAX_MMAP_THRESHOLD)
