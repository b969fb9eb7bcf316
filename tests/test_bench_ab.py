"""``python -m bench.ab``: the verdicts, the temporary trees, the command line, and one tiny real run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import ab
from bench.ab import WORKLOADS, Workload, cost_ratio, order, parse, pick_pythons, summarise, trees, verdict

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
RATE = Workload("r", "a rate", "msg/s", True, 100)
TIME = Workload("t", "a time", "us", False, 100)


# ------------------------------------------------------------------ ratios and verdicts


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.80, 0.95, "faster"),  # every round cheaper
        (1.05, 1.30, "slower"),  # every round dearer
        (0.90, 1.10, "inconclusive"),  # the rounds straddle 1
        (0.99, 1.01, "same"),  # every round within the ±2 % band
        (0.985, 0.999, "same"),  # on one side of 1, but all within the band
        (0.97, 0.999, "faster"),  # one round beyond the band, all below 1
        (1.001, 1.03, "slower"),
        (0.975, 1.015, "inconclusive"),  # straddles 1 and leaves the band
    ],
)
def test_a_spread_that_straddles_one_is_inconclusive(lo: float, hi: float, expected: str) -> None:
    assert verdict(lo, hi) == expected


def test_the_dead_band_is_a_parameter() -> None:
    assert verdict(0.97, 1.03, band=0.05) == "same"
    assert verdict(0.99, 1.01, band=0.0) == "inconclusive"


def test_the_ratio_is_head_cost_over_base_cost_whatever_the_unit() -> None:
    # a rate: HEAD twice the msg/s costs half as much
    assert cost_ratio(base=100.0, head=200.0, higher_is_better=True) == pytest.approx(0.5)
    # a time: HEAD twice the microseconds costs twice as much
    assert cost_ratio(base=100.0, head=200.0, higher_is_better=False) == pytest.approx(2.0)


def test_a_summary_is_the_median_of_the_rounds_ratios_and_their_range() -> None:
    pairs = [(100.0, 110.0), (100.0, 90.0), (100.0, 105.0), (120.0, 100.0), (100.0, 100.0)]
    s = summarise(RATE, pairs)
    ratios = sorted(b / h for b, h in pairs)
    assert s.ratio == pytest.approx(ratios[2])
    assert (s.lo, s.hi) == (pytest.approx(ratios[0]), pytest.approx(ratios[-1]))
    assert (s.base, s.head, s.rounds) == (100.0, 100.0, 5)
    assert s.verdict == "inconclusive"  # 0.83 .. 1.11

    slower = summarise(TIME, [(50.0, 60.0), (50.0, 55.0), (40.0, 50.0), (52.0, 60.0), (50.0, 54.0)])
    assert slower.verdict == "slower" and slower.lo is not None and slower.lo > 1
    assert slower.ratio == pytest.approx(1.15, abs=0.01)


def test_no_rounds_is_no_verdict() -> None:
    s = summarise(RATE, [])
    assert (s.ratio, s.verdict, s.rounds) == (None, "n/a", 0)


def test_rounds_alternate_which_side_goes_first() -> None:
    assert [order(r) for r in range(4)] == [("base", "head"), ("head", "base")] * 2


def test_the_default_workloads_are_issue_23s_key_set() -> None:
    assert ab.DEFAULT == ("oneway", "oneway-async", "rtt", "rtt-async", "paced", "fanout", "inflight64", "qos1")
    assert all(name in WORKLOADS for name in ab.DEFAULT)
    from bench.ab_measure import RUNS

    assert set(RUNS) == set(WORKLOADS)  # every row has a measurement and every measurement a row


# ------------------------------------------------------------------ command line


def test_defaults() -> None:
    ns = parse(["2032d30"])
    assert (ns.base, ns.head, ns.rounds, ns.scale, ns.band) == ("2032d30", None, 5, 1.0, 0.02)
    assert ns.workloads == list(ab.DEFAULT)
    assert ns.python is None  # found later: the oldest and newest installed


def test_fewer_than_five_rounds_only_with_quick(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["main", "HEAD", "--rounds", "3"])
    assert "at least 5" in capsys.readouterr().err
    quick = parse(["main", "--quick"])
    assert (quick.rounds, quick.scale) == (3, 0.2)
    assert parse(["main", "--quick", "--rounds", "1", "--scale", "0.05"]).rounds == 1


def test_workloads_are_checked_and_all_means_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(["main", "--workloads", "rtt, paced,rtt"]).workloads == ["rtt", "paced"]
    assert parse(["main", "--workloads", "all"]).workloads == list(WORKLOADS)
    with pytest.raises(SystemExit):
        parse(["main", "--workloads", "rtt,warp-speed"])
    assert "warp-speed" in capsys.readouterr().err


def test_python_must_be_an_interpreter(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(["main", "--python", sys.executable]).python == [sys.executable]
    with pytest.raises(SystemExit):
        parse(["main", "--python", "/nonexistent/python9"])
    assert "not an interpreter" in capsys.readouterr().err


def test_base_is_required_but_not_for_list(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse([])
    assert parse(["--list"]).list
    assert ab.main(["--list"]) == 0
    assert "inflight64" in capsys.readouterr().out


def test_the_oldest_and_newest_python_that_has_the_dependencies() -> None:
    probed = [
        ("/py39", (3, 9), True),  # below requires-python
        ("/venv310", (3, 10), True),
        ("/py310-bare", (3, 10), False),
        ("/py311", (3, 11), True),
        ("/py313-bare", (3, 13), False),  # newest installed, but cannot import pyzmq
        ("/venv312", (3, 12), True),
        ("/other312", (3, 12), True),  # the first one seen of a version wins
    ]
    assert pick_pythons(probed, (3, 10)) == ["/venv310", "/venv312"]
    assert pick_pythons([("/only", (3, 12), True)], (3, 10)) == ["/only"]
    assert pick_pythons([("/bare", (3, 12), False)], (3, 10)) == []


# ------------------------------------------------------------------ trees


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env, timeout=30).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo = tmp_path / "repo"
    (repo / "zmesh").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "zmesh" / "__init__.py").write_text("V = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "zmesh" / "__init__.py").write_text("V = 2\n")
    _git(repo, "commit", "-q", "-am", "second")
    return repo


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where tempfile makes bench.ab's temporary trees, so a test can see they are gone."""
    place = tmp_path / "scratch"
    place.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(place))
    return place


def test_a_revision_is_exported_and_removed_afterwards(repo: Path, scratch: Path) -> None:
    first = _git(repo, "rev-parse", "HEAD~1")
    with trees("HEAD~1", "HEAD", repo) as (base, head, shim):
        assert (base.path / "zmesh" / "__init__.py").read_text() == "V = 1\n"
        assert (head.path / "zmesh" / "__init__.py").read_text() == "V = 2\n"
        assert base.commit == first and base.label.startswith(first[:7]) and "first" in base.label
        assert base.temporary and head.temporary
        assert (shim / "bench" / "ab.py").is_file()  # this checkout's bench goes first on PYTHONPATH
        assert not (shim / "zmesh").exists()  # and nothing there can shadow the tree's zmesh
        assert any(scratch.iterdir())
    assert list(scratch.iterdir()) == []
    assert _git(repo, "worktree", "list").count("\n") == 0  # no worktree was added to the repository
    assert _git(repo, "status", "--porcelain") == ""


def test_no_head_means_the_working_tree_as_it_is_now(repo: Path, scratch: Path) -> None:
    (repo / "zmesh" / "__init__.py").write_text("V = 3  # not committed\n")
    with trees("HEAD", None, repo) as (base, head, _shim):
        assert (base.path / "zmesh" / "__init__.py").read_text() == "V = 2\n"
        assert (head.path / "zmesh" / "__init__.py").read_text() == "V = 3  # not committed\n"
        assert head.path != repo and "uncommitted" in head.label
        (repo / "zmesh" / "__init__.py").write_text("V = 4\n")  # an edit during the run
        assert (head.path / "zmesh" / "__init__.py").read_text() == "V = 3  # not committed\n"
    assert list(scratch.iterdir()) == []


def test_the_trees_are_removed_on_ctrl_c_too(repo: Path, scratch: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with trees("HEAD~1", "HEAD", repo):
            assert any(scratch.iterdir())
            raise KeyboardInterrupt
    assert list(scratch.iterdir()) == []


def test_a_directory_is_used_in_place_and_kept(repo: Path, scratch: Path, tmp_path: Path) -> None:
    with trees(str(repo), "HEAD", repo) as (base, _head, _shim):
        assert base.path == repo.resolve() and not base.temporary
    assert (repo / "zmesh" / "__init__.py").is_file()
    assert list(scratch.iterdir()) == []
    with pytest.raises(SystemExit, match="without zmesh"):
        with trees(str(tmp_path), "HEAD", repo):
            pass
    with pytest.raises(SystemExit, match="neither a revision"):
        with trees("no-such-rev", "HEAD", repo):
            pass
    assert list(scratch.iterdir()) == []


# ------------------------------------------------------------------ processes


def test_a_measurement_refuses_a_zmesh_from_another_tree(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), ZMESH_AB_TREE=str(tmp_path), ZMESH_INTERFACES="127.0.0.1")
    done = subprocess.run([sys.executable, "-m", "bench.ab_measure", "rtt", "10"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1
    assert "AB_ERROR" in done.stdout and "not from the tree under test" in done.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_tiny_run_end_to_end(tmp_path: Path) -> None:
    """HEAD's commit against the working tree, one round of RTT, this Python: a table, JSON, no trees left."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs this checkout's git repository")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "ab.json"
    env = dict(os.environ, TMPDIR=str(scratch), ZMESH_INTERFACES="127.0.0.1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "bench.ab", "HEAD", "--quick", "--rounds", "1", "--scale", "0.02",
         "--workloads", "rtt", "--python", sys.executable, "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=80,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "HEAD/BASE cost" in done.stdout and "\nrtt " in done.stdout
    doc = json.loads(out.read_text())
    (py,) = doc["pythons"]
    (row,) = py["summaries"]
    assert row["workload"] == "rtt" and row["rounds"] == 1
    assert row["base"] > 0 and row["head"] > 0 and row["verdict"] in ("same", "faster", "slower")
    assert row["ratio"] == pytest.approx(row["head"] / row["base"])
    assert py["errors"] == {"rtt": []}
    assert list(scratch.iterdir()) == []  # the exported commit and the copies are gone
