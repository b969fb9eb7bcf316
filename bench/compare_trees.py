"""Two source trees against each other, interleaved, for a change to a hot path.

    python bench/compare_trees.py OLD_TREE NEW_TREE [--rounds 7] [--python PY ...]

For each Python, each round runs every measure once on the old tree and once
on the new one (alternating which goes first), with the tree on
``PYTHONPATH`` and the bench scripts of *this* checkout (they use only API
that old trees have too):

* ``throughput``: ``pair_throughput.py`` msg/s, two processes, inline handler;
  ``throughput-async``: the same with an ``async def`` handler (``TP_ASYNC=1``);
  ``throughput-qos1``, ``throughput-qos1-async``: both at QoS 1 (``TP_QOS=1``);
* ``rtt`` / ``rtt-async``: ``pair_rtt.py`` p50 round trip (µs), inline and async;
* ``send-cost`` / ``send-cost-async`` / ``request-async``: ``send_cost.py``
  CPU µs per message in one process; ``send-cost-qos1`` /
  ``send-cost-qos1-async``: the same sends at QoS 1.

It prints, per Python and measure, the median of new/old (higher is better
for msg/s, lower for µs: the ratio is always "new costs this much of old",
so < 1 is faster) with the lowest and highest round's ratio. On a shared
2-core machine single rounds move 5-10 %; a median over 7 interleaved
rounds is what to quote.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> (script args, extra env, regex of the figure, higher is better)
MEASURES: dict[str, tuple[list[str], dict[str, str], str, bool]] = {
    "throughput": (["pair_throughput.py", "20000"], {}, r"msg/s (\d+)", True),
    "throughput-async": (["pair_throughput.py", "20000"], {"TP_ASYNC": "1"}, r"msg/s (\d+)", True),
    "rtt": (["pair_rtt.py", "2000"], {}, r"^([\d.]+) ", False),
    "rtt-async": (["pair_rtt.py", "2000"], {"RTT_ASYNC": "1"}, r"^([\d.]+) ", False),
    "send-cost": (["send_cost.py", "both", "20000"], {}, r": ([\d.]+) us", False),
    "send-cost-async": (["send_cost.py", "both-async", "20000"], {}, r": ([\d.]+) us", False),
    "request-async": (["send_cost.py", "request-async", "5000"], {}, r": ([\d.]+) us", False),
    "throughput-qos1": (["pair_throughput.py", "20000"], {"TP_QOS": "1"}, r"msg/s (\d+)", True),
    "throughput-qos1-async": (["pair_throughput.py", "20000"], {"TP_QOS": "1", "TP_ASYNC": "1"}, r"msg/s (\d+)", True),
    "send-cost-qos1": (["send_cost.py", "both-qos1", "20000"], {}, r": ([\d.]+) us", False),
    "send-cost-qos1-async": (["send_cost.py", "both-qos1-async", "20000"], {}, r": ([\d.]+) us", False),
}


def measure(python: str, tree: str, name: str, scale: float = 1.0) -> float:
    args, extra, pattern, _ = MEASURES[name]
    args = [str(max(1, int(int(a) * scale))) if a.isdigit() else a for a in args]
    env = dict(os.environ, PYTHONPATH=tree, ZMESH_INTERFACES="127.0.0.1", **extra)
    done = subprocess.run([python, str(HERE / args[0]), *args[1:]], env=env, capture_output=True, text=True,
                          timeout=600, cwd="/tmp")
    found = re.search(pattern, done.stdout, re.M)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{name} on {tree} with {python} failed:\n{done.stdout}\n{done.stderr[-2000:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--python", action="append", help="interpreters (default: this one)")
    parser.add_argument("--measures", default=",".join(MEASURES), help=f"subset of {','.join(MEASURES)}")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every message count (0.05: a smoke run)")
    ns = parser.parse_args()
    names = ns.measures.split(",")
    for python in ns.python or [sys.executable]:
        ratios: dict[str, list[float]] = {n: [] for n in names}
        for r in range(ns.rounds):
            for name in names:
                order = (ns.old, ns.new) if r % 2 == 0 else (ns.new, ns.old)
                got = {tree: measure(python, tree, name, ns.scale) for tree in order}
                old, new = got[ns.old], got[ns.new]
                higher_better = MEASURES[name][3]
                ratios[name].append(old / new if higher_better else new / old)
                print(f"{python} round {r + 1} {name}: old {old:g} new {new:g}", file=sys.stderr, flush=True)
        for name in names:
            values = ratios[name]
            print(f"{python}  {name:17} new/old cost {statistics.median(values):.3f} "
                  f"(rounds {min(values):.3f} .. {max(values):.3f}, n={len(values)})", flush=True)


if __name__ == "__main__":
    main()
