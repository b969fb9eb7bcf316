"""Two source trees against each other: an alias of ``python -m bench.ab`` (bench/ab.py).

    python bench/compare_trees.py OLD NEW [--rounds 7] [--python PY ...] [--measures a,b] [--scale S]

OLD and NEW are whatever ``bench.ab`` takes (directories holding ``zmesh/``,
or git revisions). The measures keep their old names and map to bench.ab's
workloads (``throughput`` is ``oneway``, ``throughput-qos1`` is ``qos1``, ...);
the defaults stay this script's: 7 rounds, every measure, this interpreter
only. The figures and the table are bench.ab's: per measure the median of
"new costs this much of old" (< 1 is faster), its min..max over the rounds
and a verdict. New work should call ``python -m bench.ab`` directly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run by its path: find the bench package

from bench.ab import main as ab_main  # noqa: E402

#: this script's measure names -> bench.ab workloads
MEASURES: dict[str, str] = {
    "throughput": "oneway",
    "throughput-async": "oneway-async",
    "rtt": "rtt",
    "rtt-async": "rtt-async",
    "send-cost": "send-cost",
    "send-cost-async": "send-cost-async",
    "request-async": "request-async",
    "throughput-qos1": "qos1",
    "throughput-qos1-async": "qos1-async",
    "send-cost-qos1": "send-cost-qos1",
    "send-cost-qos1-async": "send-cost-qos1-async",
}


def translate(argv: list[str]) -> list[str]:
    """This script's command line as bench.ab's."""
    parser = argparse.ArgumentParser(prog="bench/compare_trees.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--python", action="append", help="interpreters (default: this one)")
    parser.add_argument("--measures", default=",".join(MEASURES), help=f"subset of {','.join(MEASURES)}")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every message count (0.05: a smoke run)")
    ns = parser.parse_args(argv)
    names = [m.strip() for m in ns.measures.split(",") if m.strip()]
    unknown = [m for m in names if m not in MEASURES]
    if unknown:
        parser.error(f"unknown measures: {', '.join(unknown)}")
    out = [ns.old, ns.new, "--rounds", str(ns.rounds), "--scale", repr(ns.scale),
           "--workloads", ",".join(MEASURES[m] for m in names)]  # fmt: skip
    for python in ns.python or [sys.executable]:
        out += ["--python", python]
    if ns.rounds < 5:
        out.append("--quick")  # bench.ab asks for 5 rounds unless told this is a trial
    return out


if __name__ == "__main__":
    sys.exit(ab_main(translate(sys.argv[1:])))
