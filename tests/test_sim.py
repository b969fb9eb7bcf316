"""The deterministic simulator (zmesh.sim): many real engines, one process,
simulated network and time, faults drawn from a seed, invariants checked.

Every failure message carries the command that replays it.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from zmesh._wire import codec
from zmesh._engine import reliable
from zmesh.liveness import LivenessConfig
from zmesh.sim import FaultSpec, parse_faults, replay_command, run
from zmesh.sim.faults import Fault
from zmesh.sim.invariants import Episode, Req, RequestLog, check_requests
from zmesh.sim.network import Network
from zmesh.sim.world import World

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("crash", "restart", "stall", "partition", "loss=0.05", "dup", "reorder")
SEEDS = 200
DURATION = 30.0


def mix(seed: int) -> tuple[int, str]:
    """The mesh size and fault mix the many-seeds test uses for ``seed``."""
    rng = random.Random(f"mix-{seed}")
    faults = [kind for kind in KINDS if rng.random() < 0.5] or [rng.choice(KINDS)]
    return rng.randint(3, 8), ",".join(faults)


def without_wall(line: str) -> dict[str, object]:
    data = json.loads(line)
    data.pop("wall_seconds")
    return data


def sim_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zmesh.sim", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env=env if env is not None else dict(os.environ),
    )


@pytest.mark.timeout(60)
def test_many_seeds_with_mixed_faults_keep_every_invariant() -> None:
    failures = []
    for seed in range(SEEDS):
        nodes, faults = mix(seed)
        result = run(nodes, seed, faults, DURATION)
        if result.violations or result.converged_after_s is None:
            failures.append(
                f"seed {seed} ({nodes} nodes, {faults}); replay with:\n    "
                f"{replay_command(nodes, seed, faults, DURATION)}\n    faults: {result.faults}\n    "
                + "\n    ".join(result.violations[:5])
            )
    assert not failures, f"{len(failures)} of {SEEDS} seeds broke an invariant:\n" + "\n".join(failures)


HEAVY = "crash=3,restart=2,stall=3,partition=2,loss=0.3,dup,reorder"
HEAVY_SEEDS = range(1000, 1200)  # 0.1-0.5 s each; 8,000 more in issue 23's soak


def heavy_mix(seed: int) -> tuple[int, float]:
    """The mesh size and run length the heavy-faults test uses for ``seed``:
    8-12 nodes; 30 s (the faults start within 5-13 s, so they overlap more)
    or 60 s, the CLI's default (within 5-25 s)."""
    rng = random.Random(f"heavy-{seed}")
    return rng.randint(8, 12), rng.choice((DURATION, 60.0))


@pytest.mark.timeout(180)
def test_many_seeds_with_heavy_faults_keep_every_invariant() -> None:
    # Every fault at once, as issue 23's runs had them: three crashes (two
    # of them back), three stalls and two partitions, overlapping, under
    # 30 % loss, duplicates and reordering.
    failures = []
    for seed in HEAVY_SEEDS:
        nodes, duration = heavy_mix(seed)
        result = run(nodes, seed, HEAVY, duration)
        if result.violations or result.converged_after_s is None:
            failures.append(
                f"seed {seed} ({nodes} nodes, {HEAVY}); replay with:\n    "
                f"{replay_command(nodes, seed, HEAVY, duration)}\n    faults: {result.faults}\n    "
                + "\n    ".join(result.violations[:5])
            )
    assert not failures, f"{len(failures)} of {len(HEAVY_SEEDS)} heavy seeds broke an invariant:\n" + "\n".join(failures)


@pytest.mark.timeout(30)
def test_the_same_seed_gives_the_same_result() -> None:
    first = run(6, 7, "crash,restart,stall,partition,loss=0.05,dup,reorder", DURATION)
    second = run(6, 7, "crash,restart,stall,partition,loss=0.05,dup,reorder", DURATION)
    assert without_wall(first.to_json()) == without_wall(second.to_json())
    assert first.transitions and first.requests["sent"] > 0  # it did run a workload


@pytest.mark.timeout(60)
def test_the_json_line_does_not_depend_on_hash_seeds() -> None:
    args = ("--nodes", "4", "--seed", "3", "--faults", "restart,partition,dup", "--duration", "20")
    lines = []
    for hash_seed in ("1", "2"):
        proc = sim_cli(*args, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines.append(proc.stdout.strip().splitlines()[-1])
    assert without_wall(lines[0]) == without_wall(lines[1])


@pytest.mark.timeout(60)
def test_the_cli_prints_one_json_line_last_and_exits_by_violations() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}  # exercises the re-exec
    clean = sim_cli("--nodes", "3", "--seed", "2", "--duration", "10", env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.count("\n") == 1
    result = json.loads(clean.stdout)
    assert result["violations"] == [] and result["nodes"] == 3 and result["seed"] == 2
    assert result["converged_after_s"] is not None
    assert set(result) >= {"faults", "frames_per_node", "bytes_per_node", "sim_seconds", "wall_seconds",
                           "transitions"}
    # A hidden fault the mesh cannot heal: n1's direct frames never reach n0.
    broken = sim_cli("--nodes", "3", "--seed", "2", "--faults", "_oneway", "--duration", "10",
                     "--settle", "10", env=env)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    last = json.loads(broken.stdout.strip().splitlines()[-1])
    assert last["violations"] and last["converged_after_s"] is None
    assert any("n0" in v and "n1" in v for v in last["violations"])


@pytest.mark.timeout(30)
def test_a_stalled_pair_rejoins_within_two_heartbeats() -> None:
    # tests/test_stall.py's scenario on simulated time: one of two nodes stalls
    # 3.5-8 s (past the 3 s expiry); the pair must be whole again within two
    # heartbeat periods of the stall ending. Measured: 2-7 ms (one round trip).
    budget = 2 * LivenessConfig().heartbeat
    for seed in range(10):
        result = run(2, seed, "stall", DURATION, check_every=0.001)
        replay = replay_command(2, seed, "stall", DURATION)
        assert result.violations == [], f"{replay}: {result.violations}"
        assert result.converged_after_s is not None and result.converged_after_s <= budget + 0.05, (
            f"{replay}: converged {result.converged_after_s} s after the stall ended"
        )
        assert result.transitions.get("joined/reset", 0) >= 1, result.transitions  # the stall path ran


@pytest.mark.timeout(30)
def test_the_sim_catches_the_one_sided_stall_without_the_reannounce(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the ANNOUNCE the engine asks for after a "reset", the node that
    # expired the stalled one never sees its SUB again: one-sided membership.
    monkeypatch.setattr(Network, "announce", lambda self, host: None)
    result = run(2, 0, "stall", DURATION, settle=10.0)
    assert result.converged_after_s is None
    assert any("connecting, not joined" in v for v in result.violations), result.violations


def test_fault_specs_parse_and_reject() -> None:
    spec = parse_faults("crash=2,restart,stall,partition,loss=0.1,dup,reorder")
    assert spec == FaultSpec(crash=2, restart=1, stall=1, partition=1, loss=0.1, dup=True, reorder=True)
    assert parse_faults(spec.names()) == spec
    assert parse_faults("") == parse_faults("none") == FaultSpec()
    for bad in ("meteor", "loss=2", "dup=1", "crash=-1"):
        with pytest.raises(ValueError):
            parse_faults(bad)


# -- engine bugs the simulator found (see zmesh/sim/README.md); each replays its scenario.


@pytest.mark.timeout(30)
def test_a_lost_record_update_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # At 6 s n0 changes its record; the one frame that carries the UPDATE to n2
    # is lost. n2's registry must catch up, and n0 must be settled again.
    world = World(4, 1, FaultSpec(), DURATION)
    dropped: list[float] = []
    send = Network.send

    def lossy_send(net: Network, src: Any, link: int, endpoint: str, frame: bytes) -> None:
        if (not dropped and src.node_id == "n0" and endpoint.startswith("sim://n2/")
                and any(item[0] == codec.UPDATE for item in codec.decode_frame(frame, 1 << 30))):
            dropped.append(net.sched.now)
            return
        send(net, src, link, endpoint, frame)

    def change_record() -> None:
        world.live["n0"].set_subscriptions(frozenset({"alerts.>"}))
        world.live["n0"].end_step()

    monkeypatch.setattr(Network, "send", lossy_send)
    world.sched.at(6.0, change_record)
    result = world.run()
    assert dropped
    assert result.violations == [], result.violations[:3]


@pytest.mark.timeout(30)
def test_a_node_restarted_behind_a_long_partition_is_found() -> None:
    # n0 is cut off from 6 s to 40 s; it crashes at 8 s and is back at 9 s at a
    # new address. Its browser's startup queries (to 23 s) all fall in the cut.
    world = World(4, 1, FaultSpec(), DURATION)
    world.set_faults([Fault("partition", 6.0, 40.0, group=("n0",)), Fault("crash", 8.0, 8.0, "n0"),
                      Fault("restart", 9.0, 8.0, "n0")])
    result = world.run()
    assert result.violations == [] and result.converged_after_s is not None, result.violations[:3]


@pytest.mark.timeout(60)
def test_qos1_messages_survive_loss_partitions_and_restarts() -> None:
    seeds = range(1, 13)
    results = [run(8, seed, "restart=2,loss=0.2,partition,dup", 90.0) for seed in seeds]
    assert sum(r.requests.get("qos1_sent", 0) for r in results) >= 60  # the workload does send them
    assert [v for r in results for v in r.violations] == []


@pytest.mark.timeout(60)
def test_the_sim_catches_qos1_loss_without_retransmission(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reliable.Reliable, "_retry", lambda self, entry, now: None)
    results = [run(8, seed, "restart=2,loss=0.2,partition", 90.0) for seed in range(30, 36)]
    assert any("never handled" in v for r in results for v in r.violations)


@pytest.mark.timeout(60)
def test_a_claimant_cut_off_after_its_hello_fails_requests_with_peer_lost() -> None:
    # Issue 23, seed 500261: n3 read restarted n8's HELLO at 21.466 when its
    # stall ended, took the claim up at 22.466, and counted n8 as heard then;
    # n8 was cut off (20.330-25.178), so n3 never expired it and request r48,
    # sent to it at 24.495 and lost in the cut, was still pending at the end.
    result = run(10, 500261, HEAVY, 60.0)
    assert result.violations == [], result.violations
    assert result.transitions.get("joined/restarted", 0) >= 1  # the claim path ran


@pytest.mark.timeout(60)
def test_a_peer_lost_after_a_cut_healed_is_no_violation_when_the_silence_began_in_it() -> None:
    # Issue 23, seed 70281: n05 was cut off from n04 (17.699-27.641) and
    # stalled (20.281-27.599). n04 expired n05 at 20.291; n05 heard nothing
    # of n04 for 3 s of its own running time (2.67 s before its stall, 0.25 s
    # after) and expired it at 27.849. Its request r59, sent at 27.836 after
    # both ended, was dropped by n04 as a stranger's and failed with PeerLost
    # at once: right, although no cut overlapped the request itself.
    result = run(12, 70281, HEAVY, 60.0)
    assert result.violations == [], result.violations
    assert result.requests.get("PeerLost", 0) >= 1


def _ledger(sent: float, done: float, outcome: str = "PeerLost") -> RequestLog:
    sender = SimpleNamespace(node_id="s", uid=1, alive=True)
    target = SimpleNamespace(node_id="t", died_at=math.inf)
    log = RequestLog()
    log.add(("s.a", "r1"), Req("r1", sender, "t", target, sent))  # type: ignore[arg-type]
    log.done(sender, ("s.a", "r1"), outcome, done)  # type: ignore[arg-type]
    return log


def test_a_peer_lost_needs_a_cut_within_the_silence_that_expired_its_target() -> None:
    cut = Episode("partition", 10.0, 20.0, group=("t",))
    stall = Episode("stall", 18.0, 25.0, node="s")  # the sender's: its stalled time is not silence
    # No cut at all, or one that ended before the silence could begin: a violation.
    assert check_requests(_ledger(30.0, 30.1), [], 60.0)
    assert check_requests(_ledger(30.0, 30.1), [cut], 60.0)
    assert check_requests(_ledger(30.0, 30.1), [cut, Episode("stall", 18.0, 22.0, node="s")], 60.0)
    # The cut overlaps the request, or the silence (back over the sender's stall): none.
    assert not check_requests(_ledger(15.0, 16.0), [cut], 60.0)
    assert not check_requests(_ledger(21.0, 21.5), [cut], 60.0)
    assert not check_requests(_ledger(25.1, 25.2), [cut, stall], 60.0)
    # Any other outcome is judged as before: a reply is fine.
    assert not check_requests(_ledger(30.0, 30.1, "reply:ok"), [], 60.0)
