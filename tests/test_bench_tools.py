"""The bench's cost tools keep working on this tree (their figures are quoted in docs/reliability.md and docs/performance.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.send_cost import both_sides, main, requests, sender_only, zmq_requests

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("measure", [sender_only, both_sides, requests, zmq_requests])
async def test_each_cost_mode_measures_a_few_messages(measure) -> None:  # type: ignore[no-untyped-def]
    cost = await measure(200)
    assert 0 < cost < 0.05  # seconds of CPU per message: measured, and not absurd


def test_a_bad_command_line_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["both"]) == 2
    assert main(["fast", "10"]) == 2
    assert "send_cost.py" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["events-rcvmore", "events-frame", "again-frame", "multipart"])
def test_each_zmq_receive_mode_reads_every_message(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.zmq_receive_cost import main as receive_cost

    assert receive_cost([mode, "100"]) == 0
    assert f"{mode}: 100 of 100 read" in capsys.readouterr().out


def _run_bench(module: str, n: int) -> subprocess.CompletedProcess[str]:
    """``python -m bench.MODULE --rounds 2 -n N``, run to its end (which it must reach cleanly)."""
    run = subprocess.run([sys.executable, "-m", f"bench.{module}", "--rounds", "2", "-n", str(n)],
                         cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=50,
                         check=False)
    assert run.returncode == 0, run.stderr
    return run


def test_the_gateway_bench_times_all_three_paths() -> None:
    if shutil.which("nats-server") is None and not Path("/usr/sbin/nats-server").exists():
        pytest.skip("nats-server is not installed: apt-get install nats-server")
    run = _run_bench("gateway_rtt", 30)
    rounds = re.findall(r"^round \d: zmq p50 (\d+) p99 \d+ us; nats p50 (\d+) p99 \d+ us; gateway p50 (\d+)",
                        run.stdout, re.MULTILINE)
    assert len(rounds) == 2 and all(float(x) > 0 for r in rounds for x in r), run.stdout
    assert re.search(r"^gateway / nats: \d+\.\d\dx \[\d+\.\d\d\.\.\d+\.\d\d\]$", run.stdout, re.MULTILINE), run.stdout


def test_the_mcp_bench_times_every_path() -> None:
    pytest.importorskip("mcp", reason="pip install 'zmesh-agents[mcp]'")
    run = _run_bench("mcp_rtt", 20)
    rounds = re.findall(r"^round \d: mesh p50 (\d+) .*; mcp-stdio p50 (\d+) p99 \d+ us; mcp-http p50 (\d+)",
                        run.stdout, re.MULTILINE)
    assert len(rounds) == 2 and all(float(x) > 0 for r in rounds for x in r), run.stdout
    for path in ("mcp-memory", "mcp-stdio", "mcp-http"):
        assert re.search(rf"^{path} / mesh: \d+\.\d\dx \[\d+\.\d\d\.\.\d+\.\d\d\]$", run.stdout, re.MULTILINE), run.stdout


def test_the_a2a_bench_times_both_paths() -> None:
    pytest.importorskip("a2a.client", reason="the A2A bench needs a2a-sdk: pip install 'zmesh-agents[a2a]'")
    run = _run_bench("a2a_latency", 30)
    rounds = re.findall(r"^round \d: mesh p50 (\d+) p99 \d+ us; a2a p50 (\d+) p99 \d+ us$", run.stdout, re.MULTILINE)
    assert len(rounds) == 2 and all(float(x) > 0 for r in rounds for x in r), run.stdout
    assert re.search(r"^a2a / mesh: \d+\.\dx \[\d+\.\d\.\.\d+\.\d\]$", run.stdout, re.MULTILINE), run.stdout
