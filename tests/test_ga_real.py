"""zmesh.ga against the real GenericAgent (lsdefine/GenericAgent at 6d2cf09),
run offline: its model is a fake OpenAI-compatible server on 127.0.0.1.

The source is found at ``$ZMESH_GA_SOURCE`` (a checkout, or a git directory
holding that commit), else in the workplace's mirror beside this checkout;
without it the tests skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import zmesh
from zmesh.ga import GABridge
from zmesh.ga import _files as files
from zmesh.ga._process import find_subagents

from .fake_llm import FakeLLM

COMMIT = "6d2cf09"
_HERE = Path(__file__).resolve()
_MIRROR = _HERE.parents[min(2, len(_HERE.parents) - 1)] / ".mirror" / "lsdefine+GenericAgent" / "repo"

pytestmark = pytest.mark.timeout(120)


def _source() -> Path | None:
    given = os.environ.get("ZMESH_GA_SOURCE")
    where = Path(given) if given else _MIRROR
    return where if where.exists() else None


def _copy_commit(git_dir: Path, dest: Path) -> None:
    """The tree at COMMIT, but for the images and PDFs (a mirror may lack their blobs)."""
    listing = subprocess.run(["git", "-C", str(git_dir), "ls-tree", "-r", "-z", COMMIT],
                             capture_output=True, check=True, timeout=60).stdout
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, kind, sha = meta.split()
        name = path.decode()
        if kind != b"blob" or name.endswith((".gif", ".png", ".jpg", ".pdf")):
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "-C", str(git_dir), "cat-file", "blob", sha.decode()],
                                          capture_output=True, check=True, timeout=60).stdout)


@pytest.fixture(scope="module")
def ga_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _source()
    if source is None:
        pytest.skip("GenericAgent's source is absent (set ZMESH_GA_SOURCE to a checkout of "
                    f"lsdefine/GenericAgent at {COMMIT})")
    tree = tmp_path_factory.mktemp("ga-source") / "GenericAgent"
    if (source / "agentmain.py").is_file():
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("temp", "memory", ".git", "mykey.py"))
    else:
        _copy_commit(source, tree)
    return tree


@pytest.fixture
def root(ga_tree: Path, tmp_path: Path) -> Iterator[Path]:
    ga = tmp_path / "GenericAgent"
    shutil.copytree(ga_tree, ga)
    yield ga
    for pid in find_subagents(ga).values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while find_subagents(ga) and time.monotonic() < deadline:
        time.sleep(0.02)


@contextlib.asynccontextmanager
async def bridged(root: Path, **options: Any) -> AsyncIterator[tuple[GABridge, zmesh.Agent, FakeLLM]]:
    with FakeLLM(chunk_delay=0.05) as llm:
        (root / "mykey.py").write_text(
            "native_oai_config = {'name': 'fake', 'apikey': 'sk-fake', "
            f"'apibase': '{llm.base_url}', 'model': 'fake-model', 'api_mode': 'chat_completions', "
            "'max_retries': 0, 'read_timeout': 30}\n", encoding="utf-8")
        async with zmesh.Node("ga", transport="inproc") as node, \
                GABridge(node, root, poll=0.05, scan_interval=0.2, **options) as bridge:
            yield bridge, node.agent("me"), llm


async def test_generic_agent_runs_rounds_for_mesh_requests(root: Path) -> None:
    async with bridged(root, spawn=True) as (bridge, me, llm):
        first = await me.request("ga-bridge", "launch", {"name": "researcher", "input": "ECHO the first answer"},
                                 timeout=60)
        assert "the first answer" in first.payload and "[ROUND END]" not in first.payload
        second = await me.request("researcher", "task", "ECHO the second answer", timeout=60)
        assert "the second answer" in second.payload
        assert files.output_file(root / "temp" / "researcher", 1).exists()
        said = [m["content"] for m in llm.requests[-1]["messages"] if m.get("role") == "user"]
        assert any("the first answer" in str(c) for c in said), "round 2 goes on the same conversation"
        status = (await me.request("researcher", "status", None, timeout=5)).payload
        assert status["state"] == "waiting" and status["round"] == 1
        assert bridge.stats()["counts"]["launched"] == 1


async def test_generic_agent_backend_failure_ends_the_round_with_the_error(root: Path) -> None:
    async with bridged(root, spawn=True) as (_, me, _llm):
        reply = await me.request("ga-bridge", "launch", {"name": "flaky", "input": "FAIL please"}, timeout=60)
        assert "500" in reply.payload or "rror" in reply.payload


async def test_generic_agent_killed_mid_round_gives_peer_lost(root: Path) -> None:
    async with bridged(root, spawn=True) as (bridge, me, _llm):
        await me.request("ga-bridge", "launch", {"name": "victim", "input": "ECHO ready"}, timeout=60)
        pid = bridge.stats()["folders"]["victim"]["pid"]
        asked = asyncio.ensure_future(me.request("victim", "task", "HANG", timeout=60))
        await asyncio.sleep(0)
        deadline = time.monotonic() + 30
        while not (root / "temp" / "victim" / "reply.txt").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        while (root / "temp" / "victim" / "reply.txt").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # taken: the round runs, its model hangs
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(zmesh.PeerLost, match="exited without ending round 1"):
            await asked


async def test_generic_agent_stop_ends_a_streaming_round(root: Path) -> None:
    async with bridged(root, spawn=True, launch_args=("--verbose",)) as (_, me, _llm):
        await me.request("ga-bridge", "launch", {"name": "talker", "input": "ECHO ready"}, timeout=60)
        asked = asyncio.ensure_future(me.request("talker", "task", "SLOW 400", timeout=60))
        out = files.output_file(root / "temp" / "talker", 1)
        deadline = time.monotonic() + 30
        while "part3 " not in (files.read_round(out) or files.Round(False, "")).text:
            assert time.monotonic() < deadline, "the round never streamed"
            await asyncio.sleep(0.05)
        said = await me.request("talker", "stop", None, timeout=5)
        assert said.payload["stopped"] is True
        text = (await asked).payload
        assert "part3 " in text and "part399" not in text
        after = await me.request("talker", "task", "ECHO after the stop", timeout=60)
        assert "after the stop" in after.payload
