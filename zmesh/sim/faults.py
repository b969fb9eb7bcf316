"""The fault spec (``--faults``) and the schedule drawn from it with the seed.

Spec: a comma list of ``crash``, ``restart``, ``stall``, ``partition`` (each
optionally ``=K`` for K of them), ``loss=P``, ``dup`` and ``reorder``. Every
fault starts at or after 5 s and is over by the *heal* time, so the run can
check that the mesh converges after it:

* ``crash``: a node dies (its state is gone) and stays dead.
* ``restart``: a node dies and comes back 0.5-8 s later under the same node
  id with a new incarnation (so both the "restarted" HELLO and the expiry
  path are drawn).
* ``stall``: a node's loop freezes for 3.5-8 s (past ``expire_after``).
* ``partition``: the nodes split into two groups for 4-12 s.
* ``loss=P`` / ``dup`` / ``reorder``: for the whole faulty period.

Names starting with ``_`` are for testing the checker itself and never
heal: ``_oneway`` cuts direct frames from the second node to the first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["FaultSpec", "Fault", "parse_faults", "schedule", "KINDS", "DUP_P"]

KINDS = ("crash", "restart", "stall", "partition", "loss", "dup", "reorder")
HIDDEN = ("_oneway",)
DUP_P = 0.05  # while ``dup`` is on, this share of frames arrives twice
START = 5.0


@dataclass(frozen=True)
class FaultSpec:
    crash: int = 0
    restart: int = 0
    stall: int = 0
    partition: int = 0
    loss: float = 0.0
    dup: bool = False
    reorder: bool = False
    oneway: bool = False

    def names(self) -> list[str]:
        out: list[str] = []
        for name in ("crash", "restart", "stall", "partition"):
            count = getattr(self, name)
            if count:
                out.append(name if count == 1 else f"{name}={count}")
        if self.loss:
            out.append(f"loss={self.loss:g}")
        out += [name for name in ("dup", "reorder") if getattr(self, name)]
        if self.oneway:
            out.append("_oneway")
        return out

    def __bool__(self) -> bool:
        return bool(self.names())


def parse_faults(spec: str | list[str] | tuple[str, ...] | FaultSpec | None) -> FaultSpec:
    """``"crash,loss=0.05"`` (or a list of such words) -> FaultSpec; ValueError if unknown."""
    if isinstance(spec, FaultSpec):
        return spec
    words = [w.strip() for w in (spec.split(",") if isinstance(spec, str) else spec or ())
             if w.strip() and w.strip() != "none"]
    fields: dict[str, int | float | bool] = {}
    for word in words:
        name, _, value = word.partition("=")
        if name in ("crash", "restart", "stall", "partition"):
            count = int(value) if value else 1
            if count < 0:
                raise ValueError(f"fault {word!r}: the count must be >= 0")
            fields[name] = count
        elif name == "loss":
            p = float(value) if value else 0.05
            if not 0.0 <= p < 1.0:
                raise ValueError(f"fault {word!r}: P must be in [0, 1)")
            fields["loss"] = p
        elif name in ("dup", "reorder") and not value:
            fields[name] = True
        elif name == "_oneway" and not value:
            fields["oneway"] = True
        else:
            raise ValueError(f"unknown fault {word!r}; expected a comma list of {', '.join(KINDS)} (loss=P)")
    return FaultSpec(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Fault:
    """One thing that happens to the mesh at ``at`` (and is undone at ``until``)."""

    kind: str  # crash, restart, stall, partition, lossy, oneway
    at: float
    until: float
    node: str = ""
    group: tuple[str, ...] = ()  # partition: one side (the other is everyone else)

    def describe(self) -> str:
        if self.kind == "crash":
            return f"crash {self.node} @{self.at:.3f}"
        if self.kind == "restart":
            return f"restart {self.node} @{self.at:.3f} (down since {self.until:.3f})"
        if self.kind == "stall":
            return f"stall {self.node} @{self.at:.3f}-{self.until:.3f}"
        if self.kind == "partition":
            return f"partition {'+'.join(self.group)}|rest @{self.at:.3f}-{self.until:.3f}"
        return f"{self.kind} @{self.at:.3f}-{self.until:.3f}"


def schedule(spec: FaultSpec, rng: random.Random, node_ids: list[str], duration: float) -> tuple[list[Fault], float]:
    """Draw the faults; return them (sorted by time) and the heal time (0.0: none)."""
    n = len(node_ids)
    faults: list[Fault] = []
    latest = max(START, START + 0.4 * (duration - 2 * START))  # latest start of an episode
    # Victims of crashes: never all of the nodes.
    victims = list(node_ids)
    rng.shuffle(victims)
    crashes = min(spec.crash + spec.restart, max(0, n - 1))
    dead, back = victims[:crashes], victims[: min(spec.restart, crashes)]
    for node in dead:
        at = rng.uniform(START, latest)
        if node in back:
            up = at + rng.uniform(0.5, 8.0)
            faults.append(Fault("crash", at, at, node))
            faults.append(Fault("restart", up, at, node))
        else:
            faults.append(Fault("crash", at, at, node))
    survivors = [node for node in node_ids if node not in dead or node in back]
    for _ in range(spec.stall):
        at = rng.uniform(START, latest)
        faults.append(Fault("stall", at, at + rng.uniform(3.5, 8.0), rng.choice(survivors or node_ids)))
    for _ in range(spec.partition):
        if n < 2:
            break
        at = rng.uniform(START, latest)
        size = rng.randint(1, n // 2)
        group = tuple(sorted(rng.sample(node_ids, size)))
        faults.append(Fault("partition", at, at + rng.uniform(4.0, 12.0), group=group))
    heal = max((max(f.at, f.until) for f in faults), default=0.0)
    if spec.loss or spec.dup or spec.reorder:
        end = heal if heal > START else START + rng.uniform(5.0, 15.0)
        faults.append(Fault("lossy", START, end))
        heal = max(heal, end)
    if spec.oneway and n >= 2:
        faults.append(Fault("oneway", 0.0, 0.0, node_ids[1], group=(node_ids[0],)))
    faults.sort(key=lambda f: (f.at, f.kind, f.node))
    return faults, heal
