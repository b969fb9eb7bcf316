"""``python -m zmesh.sim``: run the simulator; one JSON line per run on stdout.

    python -m zmesh.sim --nodes N --seed S [--faults SPEC] [--duration SECONDS] [-v]
    python -m zmesh.sim --soak --seeds A..B --nodes N --faults SPEC

Exits 1 when any run has violations, else 0. Progress goes to stderr (-v).
"""

from __future__ import annotations

import os
import sys

if os.environ.get("PYTHONHASHSEED") is None:  # hashing must not change the order of anything
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])

import argparse  # noqa: E402

from . import parse_faults, replay_command, run  # noqa: E402


def _seeds(text: str) -> range:
    first, sep, last = text.partition("..")
    return range(int(first), int(last) + 1) if sep else range(int(first), int(first) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zmesh.sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", default="",
                        help="comma list of crash, restart, stall, partition (each =K for K of them), "
                             "loss=P, dup, reorder")
    parser.add_argument("--duration", type=float, default=60.0, help="sim seconds (default 60)")
    parser.add_argument("--check-every", type=float, default=0.5, help="sim seconds between checks")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="sim seconds after the last fault heals to wait for convergence")
    parser.add_argument("--soak", action="store_true", help="run every seed of --seeds, one line each")
    parser.add_argument("--seeds", default="", help="A..B (with --soak)")
    parser.add_argument("--wake-resubscribes", action="store_true",
                        help="a stalled node's SUB resends its subscriptions when it wakes "
                             "(real ZeroMQ does not; this hides stall bugs)")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    try:
        spec = parse_faults(args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    seeds = _seeds(args.seeds) if args.soak and args.seeds else range(args.seed, args.seed + 1)
    status = 0
    failed = []
    for seed in seeds:
        result = run(args.nodes, seed, spec, args.duration, check_every=args.check_every,
                     settle=args.settle, verbose=args.verbose,
                     wake_resubscribes=args.wake_resubscribes)
        print(result.to_json(), flush=True)
        if result.violations:
            status = 1
            failed.append(seed)
            if args.soak:
                print(f"replay: {replay_command(args.nodes, seed, spec, args.duration)}",
                      file=sys.stderr)
    if args.soak:
        print(f"soak: {len(seeds)} seeds, {len(failed)} with violations: {failed}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
