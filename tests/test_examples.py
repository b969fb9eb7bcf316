"""Every file in examples/ runs and says what it should."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPECTED = {
    "quickstart.py": ["1 + 2 = 3", "broadcast reached 1 agent(s)", "handoff accepted: True"],
    "two_processes.py": ["found by capability: ['answerer']", "HELLO FROM ANOTHER PROCESS"],
    "blocking.py": ["reviewed 'chapter 1' (asked by writer)"],
    "keys.py": ["alice's endpoint carries her public key: True", "over CurveZMQ: pong 1",
                "bob still a peer of alice: False"],
    "observe_and_dead_letters.py": [
        "1 / 4 = 0.25",
        "log error: zmesh: handler of agent 'flaky' for topic 'divide' raised ZeroDivisionError",
        "remote error, at once: ZeroDivisionError",
        "dead letter: not_found late trace-42",
        "late got are you there? trace trace-42",
    ],
    "watch_the_mesh.py": [
        "node-b: incarnation ",
        "worker: handled 20 (",
        "inbox 0/16384, dropped 0, dead letters 0",
        "event: agent_joined helper on node-b",
    ],
    "migrate_file_bus.py": [
        "the file bus has the seed's folders: True",
        "quote for 12: 119.88 (from the file bus)",
        "shadow mismatch on price.quote: the mesh answered differently",
        "shadowed 3: 2 match, 1 mismatch",
        "after the fix: 1 mismatch in total, 5 match",
        "price.quote now served by the mesh: 19.98",
        "flag: new; gone down each track: legacy 0, shadow 6, new 1",
    ],
    "tracing.py": [
        "SERVER   process draft.write  checker",
        "CLIENT   delegate draft.write writer",
        "SERVER   process draft.write  writer",
        "parent (root)           CLIENT   request draft.write  planner",
        "a draft about otters (checked)",
    ],
    "last_will.py": [
        "worker-1: up",
        "worker-1: gone (its will, broadcast by this node)",
        "worker-2: up",
        "worker-2 closed; wills published by this node: 1",
    ],
    "stream_tokens.py": [
        "the answer came in 41 chunks, from [fast]: word0 word1 word2 ...",
        "cancelled: ['slow'] and its model's stream was closed",
        "the UI stopped after 6 chunks; cancelled: ['slow', 'fast']; the fast model stopped early: True",
    ],
    "review_swarm.py": [
        "reviewers: {'ada': {'model': 'fast-model'}, 'bob': {'model': 'fast-model'}, 'cy': {'model': 'slow-model'}}",
        "first two reviews from: ['ada', 'bob']",
        "the slow reviewer was stopped: its model sent ",
        "a request that timed out stopped its model too (",
        "summaries by: ['sum1', 'sum2']",
        "no translator: no agent in mesh 'reviews' has capability 'translate'",
        "the late joiner read the plan at once: {'step': 3, 'todo': 'polish'}",
    ],
}
#: Examples that need an extra, skipped only where it is not installed (the test extra installs it).
NEEDS = {"tracing.py": "opentelemetry.sdk.trace", "review_swarm.py": "openai", "stream_tokens.py": "openai"}


def test_every_example_is_checked() -> None:
    found = {f for f in os.listdir(os.path.join(ROOT, "examples")) if f.endswith(".py")}
    assert found == set(EXPECTED)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    result = subprocess.run(
        [sys.executable, os.path.join("examples", name)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"},
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr, "an example's output reads as a crash"
    for line in EXPECTED[name]:
        assert line in result.stdout, f"{line!r} not in:\n{result.stdout}"
