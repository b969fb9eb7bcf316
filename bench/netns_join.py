"""Join time over real multicast: N hosts (network namespaces), mDNS discovery, no seeds.

    python -m bench.netns_join [--hosts 2,5,10] [--repeat 3] [--out bench/out/netns_join.json]

For every N and every repeat, a fresh lab (tests/netns.py) builds N+1 hosts
on one bridge.  One zmesh node per host (``tests._netns_node``: ZeroMQ
transport, mDNS on, no seeds, ``interfaces=`` the host's address, one agent)
is launched on each of the first N hosts; every child imports zmesh and
reports ``ready``, then all are told to start their ``Node`` at the same
instant (a ``time.monotonic()`` deadline: the clock is shared by every
namespace of the machine).  Measured:

* **all known**: from that instant until the last node's registry holds all
  N agents (each child prints the monotonic time its registry became
  complete).
* **one joins**: the extra host's node then starts into the running mesh of
  N; from its start until it knows all N+1 agents and every old node has its
  agent.

Needs root, iproute2 and network namespaces; without them it prints why and
exits 0.  All traffic stays inside the lab's namespaces (10.231.x.0/24
inside namespaces it creates and deletes).  Every wait has a deadline and
every child is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "netns_join.json"
START_MARGIN = 0.3  # seconds between the "go" command and the common start instant


def _parse(child: Any) -> list[dict[str, Any]]:
    out = []
    for line in child.lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _events(child: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in _parse(child) if e.get("event") == kind]


def _launch(lab: Any, host: Any, mesh: str, name: str, expect: int) -> Any:
    argv = [sys.executable, "-m", "tests._netns_node", "--mesh", mesh, "--name", name,
            "--interfaces", host.address, "--expect", str(expect), "--wait-go",
            "--snapshot", "5", "--duration", "120", "--log", "WARNING"]
    return lab.run(host, argv, stdin=True)


def _go(lab: Any, children: list[Any], timeout: float) -> float:
    """Wait until every child is ready, then start them all at one instant; return it."""
    lab.wait_until(lambda: all(_events(c, "ready") for c in children), timeout, "children ready")
    at = time.monotonic() + START_MARGIN
    for child in children:
        child.send(json.dumps({"op": "go", "at": at}))
    return at


def one_run(n: int, timeout: float) -> dict[str, Any]:
    """Build a lab of n+1 hosts, measure both phases, tear everything down."""
    from tests.netns import NetnsLab

    lab = NetnsLab()
    mesh = f"bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    try:
        hosts = lab.add_hosts(n + 1)
        names = [f"n{i:02d}" for i in range(n)]
        children = [_launch(lab, host, mesh, name, n) for host, name in zip(hosts, names)]
        at = _go(lab, children, timeout)
        lab.wait_until(lambda: all(_events(c, "complete") for c in children), timeout,
                       f"{n} nodes to know all {n} agents")
        starts = [_events(c, "start")[0]["t"] for c in children]
        complete = [_events(c, "complete")[0]["t"] for c in children]
        per_node = [t - at for t in complete]

        newcomer_name = f"n{n:02d}"
        newcomer = _launch(lab, hosts[n], mesh, newcomer_name, n + 1)
        at2 = _go(lab, [newcomer], timeout)

        def joined_by(child: Any) -> float | None:
            for e in _events(child, "mesh"):
                if e["kind"] == "agent_joined" and e["agent_id"] == newcomer_name:
                    return float(e["t"])
            return None

        lab.wait_until(
            lambda: bool(_events(newcomer, "complete")) and all(joined_by(c) is not None for c in children),
            timeout, "the newcomer to be known by all and to know all",
        )
        new_complete = _events(newcomer, "complete")[0]["t"] - at2
        old_know = [joined_by(c) - at2 for c in children]  # type: ignore[operator]
        churn = sum(
            1 for c in [*children, newcomer] for e in _events(c, "mesh") if e["kind"] == "peer_left"
        )
        return {
            "hosts": n,
            "all_known": max(per_node),
            "per_node": per_node,
            "start_skew": max(starts) - min(starts),
            "one_joins": max(new_complete, *old_know),
            "newcomer_knows_all": new_complete,
            "all_know_newcomer": max(old_know),
            "peer_left_events": churn,
        }
    finally:
        lab.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="2,5,10", help="comma-separated host counts (default 2,5,10)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per host count (default 3)")
    parser.add_argument("--timeout", type=float, default=60.0, help="deadline of every wait, seconds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output file")
    args = parser.parse_args(argv)
    try:
        counts = [int(x) for x in args.hosts.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--hosts must be comma-separated integers, got {args.hosts!r}")
    if not counts or any(c < 2 for c in counts) or args.repeat < 1:
        parser.error("--hosts needs counts >= 2 and --repeat >= 1")

    sys.path.insert(0, str(REPO_ROOT))
    try:
        from tests.netns import netns_unavailable
    except ImportError as exc:  # pytest missing, say
        print(f"netns_join: the lab harness cannot be imported ({exc}); skipped.")
        return 0
    reason = netns_unavailable()
    if reason is not None:
        print(f"netns_join: network namespaces are unavailable here ({reason}); skipped.")
        return 0

    runs: list[dict[str, Any]] = []
    for n in counts:
        for i in range(args.repeat):
            run = one_run(n, args.timeout)
            runs.append(run)
            print(f"  {n:>3} hosts, run {i + 1}/{args.repeat}: all known {run['all_known'] * 1000:7.1f} ms, "
                  f"one joins {run['one_joins'] * 1000:7.1f} ms, peer_left {run['peer_left_events']}",
                  flush=True)

    summary = []
    for n in counts:
        mine = [r for r in runs if r["hosts"] == n]
        all_known = [r["all_known"] for r in mine]
        one_joins = [r["one_joins"] for r in mine]
        summary.append({
            "hosts": n,
            "runs": len(mine),
            "all_known_median": statistics.median(all_known),
            "all_known_max": max(all_known),
            "one_joins_median": statistics.median(one_joins),
            "one_joins_max": max(one_joins),
            "peer_left_events": sum(r["peer_left_events"] for r in mine),
        })

    print()
    print("mDNS join time over a namespace bridge (ms; from a common start instant)")
    header = f"{'hosts':>5}  {'runs':>4}  {'all known med':>13}  {'max':>7}  {'one joins med':>13}  {'max':>7}  peer_left"
    print(header)
    print("-" * len(header))
    for row in summary:
        print(f"{row['hosts']:>5}  {row['runs']:>4}  {row['all_known_median'] * 1000:>13.1f}  "
              f"{row['all_known_max'] * 1000:>7.1f}  {row['one_joins_median'] * 1000:>13.1f}  "
              f"{row['one_joins_max'] * 1000:>7.1f}  {row['peer_left_events']:>9}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    args.out.write_text(json.dumps({
        "bench": "netns_join",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg_after": load},
        "liveness": {"heartbeat": 0.2, "evasive_after": 0.6, "expire_after": 1.5},
        "summary": summary,
        "runs": runs,
    }, indent=2) + "\n")
    print(f"\nwrote {args.out.relative_to(REPO_ROOT) if args.out.is_relative_to(REPO_ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
