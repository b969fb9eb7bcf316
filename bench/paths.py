"""Sequential request latency of a few paths to one agent, timed in interleaved rounds: what the
gateway, MCP and A2A benches share (``bench.gateway_rtt``, ``bench.mcp_rtt``, ``bench.a2a_latency``)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

__all__ = ["interleave", "report", "stop", "time_calls"]

Call = Callable[[], Awaitable[Any]]


async def time_calls(call: Call, n: int, warmup: int) -> tuple[float, float]:
    """p50 and p99 in µs of ``n`` sequential ``call()``s, after ``min(n, warmup)`` untimed ones."""
    for _ in range(min(n, warmup)):
        await call()
    took = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        took.append(time.perf_counter() - start)
    took.sort()
    return took[len(took) // 2] * 1e6, took[int(len(took) * 0.99)] * 1e6


async def interleave(calls: Mapping[str, Call], rounds: int, n: int, warmup: int) -> dict[str, list[float]]:
    """Each round times every path in turn (printing its p50 and p99); each path's p50 per round."""
    p50s: dict[str, list[float]] = {path: [] for path in calls}
    for r in range(rounds):
        line = []
        for path, call in calls.items():
            p50, p99 = await time_calls(call, n, warmup)
            p50s[path].append(p50)
            line.append(f"{path} p50 {p50:.0f} p99 {p99:.0f} us")
        print(f"round {r + 1}: " + "; ".join(line), flush=True)
    return p50s


def report(p50s: Mapping[str, list[float]], against: Mapping[str, Sequence[str]], digits: int = 2) -> None:
    """The median p50 of each path, then each path's per-round ratio to each of its ``against`` bases:
    the median and, in brackets, the spread."""
    print("median p50: " + ", ".join(f"{path} {statistics.median(v):.0f} us" for path, v in p50s.items()))
    for path, bases in against.items():
        for base in bases:
            ratios = [p / b for p, b in zip(p50s[path], p50s[base], strict=True)]
            print(f"{path} / {base}: {statistics.median(ratios):.{digits}f}x "
                  f"[{min(ratios):.{digits}f}..{max(ratios):.{digits}f}]")


def stop(*processes: subprocess.Popen[bytes] | None) -> None:
    """End the bench's children: SIGTERM (stdin closed for one that waits on it), then SIGKILL after 15 s."""
    for proc in processes:
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            else:
                proc.terminate()
    for proc in processes:
        if proc is not None:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
