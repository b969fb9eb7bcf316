"""Results: the terminal table, results.json and the PNG chart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["METRICS", "SystemResult", "fill_spread", "metric_values", "ratios", "spread", "table", "write_chart", "write_json"]

#: metric -> (workload, index into an RTT run's (p50, p99) or None)
METRICS: dict[str, tuple[str, int | None]] = {
    "throughput": ("throughput", None),
    "rtt_p50": ("rtt", 0),
    "rtt_p99": ("rtt", 1),
    "fanout": ("fanout", None),
}


@dataclass
class SystemResult:
    """Everything measured (or not) for one system."""

    key: str
    label: str
    notes: str = ""
    skipped: str = ""  # why the system did not run at all
    versions: dict[str, str] = field(default_factory=dict)
    throughput_msgs_per_s: float | None = None
    rtt_p50_us: float | None = None
    rtt_p99_us: float | None = None
    fanout_deliveries_per_s: float | None = None
    errors: dict[str, str] = field(default_factory=dict)  # workload -> error text
    seconds: dict[str, float] = field(default_factory=dict)  # workload -> wall time of all its runs
    runs: dict[str, list[Any]] = field(default_factory=dict)  # workload -> every repeat's value
    spread: dict[str, list[float]] = field(default_factory=dict)  # metric -> [min, max] over the repeats


def metric_values(r: SystemResult, metric: str) -> list[float]:
    """Every repeat's value of *metric* (``throughput``, ``rtt_p50``, ``rtt_p99``, ``fanout``)."""
    workload, index = METRICS[metric]
    runs = r.runs.get(workload) or []
    return [float(v[index]) if index is not None else float(v) for v in runs]


def spread(r: SystemResult, metric: str) -> tuple[float, float] | None:
    """``(min, max)`` of *metric* over the repeats, or None if it has no value."""
    values = metric_values(r, metric)
    return (min(values), max(values)) if values else None


def fill_spread(r: SystemResult) -> None:
    """Store every metric's ``[min, max]`` in ``r.spread`` (results.json)."""
    for metric in METRICS:
        sp = spread(r, metric)
        if sp is not None:
            r.spread[metric] = [sp[0], sp[1]]


def ratios(results: list[SystemResult], baseline: str) -> dict[str, dict[str, float | None]]:
    """Per system: throughput and fan-out as a multiple of the baseline's
    (``>1`` is faster), RTT p50 and p99 as a multiple of the baseline's (``>1`` is slower)."""
    base = next((r for r in results if r.key == baseline), None)

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, dict[str, float | None]] = {}
    for r in results:
        out[r.key] = {
            "throughput": div(r.throughput_msgs_per_s, base.throughput_msgs_per_s if base else None),
            "rtt_p50": div(r.rtt_p50_us, base.rtt_p50_us if base else None),
            "rtt_p99": div(r.rtt_p99_us, base.rtt_p99_us if base else None),
            "fanout": div(r.fanout_deliveries_per_s, base.fanout_deliveries_per_s if base else None),
        }
    return out


def _num(v: float | None, err: str | None, digits: int = 0) -> str:
    if v is None:
        return "error" if err else "-"
    return f"{v:,.{digits}f}"


def _ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _pm(r: SystemResult, metric: str, median: float | None) -> str:
    """Half the min..max range as a percentage of the median: ``±4%``."""
    sp = spread(r, metric)
    if sp is None or not median or len(metric_values(r, metric)) < 2:
        return ""
    return f"±{50.0 * (sp[1] - sp[0]) / median:.0f}%"


def table(results: list[SystemResult], baseline: str, subscribers: int) -> str:
    """The comparison table, one row per system, plus notes and errors under it."""
    rat = ratios(results, baseline)
    head = [
        "system", "one-way msg/s", "±", f"vs {baseline}", "RTT p50 us", "±", "RTT p99 us", f"vs {baseline}",
        f"fan-out x{subscribers} deliv/s", "±", f"vs {baseline}",
    ]  # fmt: skip
    rows: list[list[str]] = []
    for r in results:
        if r.skipped:
            rows.append([r.label, "skipped", *[""] * (len(head) - 2)])
            continue
        q = rat[r.key]
        rows.append(
            [
                r.label,
                _num(r.throughput_msgs_per_s, r.errors.get("throughput")),
                _pm(r, "throughput", r.throughput_msgs_per_s),
                _ratio(q["throughput"]),
                _num(r.rtt_p50_us, r.errors.get("rtt"), 1),
                _pm(r, "rtt_p50", r.rtt_p50_us),
                _num(r.rtt_p99_us, r.errors.get("rtt"), 1),
                _ratio(q["rtt_p50"]),
                _num(r.fanout_deliveries_per_s, r.errors.get("fanout")),
                _pm(r, "fanout", r.fanout_deliveries_per_s),
                _ratio(q["fanout"]),
            ]
        )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    out.append("")
    if not any(r.key == baseline and not r.skipped for r in results):
        out.append(f"no ratios: {baseline} is not in this run.")
    out.append(
        f"vs {baseline}: throughput columns are multiples of {baseline}'s rate (>1 = faster); "
        f"the RTT column is p50 / {baseline}'s p50 (>1 = slower). '-' = not applicable. "
        "± = half the min..max range of the repeats, as % of the median."
    )
    for r in results:
        if r.skipped:
            out.append(f"  {r.label}: skipped: {r.skipped}")
        elif r.notes:
            out.append(f"  {r.label}: {r.notes}")
        for workload, err in r.errors.items():
            out.append(f"  {r.label} {workload} error: {err}")
    return "\n".join(out)


def write_json(
    path: Path,
    meta: dict[str, Any],
    results: list[SystemResult],
    baseline: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write results.json; *extra* adds top-level sections (targets, zmesh join/scale, ...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "meta": meta,
        "baseline": baseline,
        "results": [asdict(r) for r in results],
        "ratios_vs_baseline": ratios(results, baseline),
        **(extra or {}),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def write_chart(path: Path, results: list[SystemResult], title: str, subscribers: int) -> str:
    """Write the PNG; return "" or a one-line note on why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return "matplotlib not installed (pip install matplotlib): chart skipped"
    ran = [r for r in results if not r.skipped]
    if not ran:
        return "nothing ran: chart skipped"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    panels: list[tuple[Any, str, list[tuple[str, float]]]] = [
        (axes[0], "one-way throughput (msgs/s)",
         [(r.label, r.throughput_msgs_per_s) for r in ran if r.throughput_msgs_per_s is not None]),
        (axes[1], f"fan-out, 1 -> {subscribers} (deliveries/s)",
         [(r.label, r.fanout_deliveries_per_s) for r in ran if r.fanout_deliveries_per_s is not None]),
    ]  # fmt: skip
    for ax, name, data in panels:
        labels = [d[0] for d in data]
        values = [d[1] for d in data]
        bars = ax.bar(range(len(values)), values, color="#4C72B0")
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
        ax.set_xticks(range(len(values)), labels, rotation=25, ha="right", fontsize=9)
        ax.set_title(name)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.margins(y=0.12)
    ax = axes[2]
    rtt = [r for r in ran if r.rtt_p50_us is not None and r.rtt_p99_us is not None]
    xs = list(range(len(rtt)))
    w = 0.38
    b50 = ax.bar([x - w / 2 for x in xs], [r.rtt_p50_us or 0.0 for r in rtt], w, label="p50", color="#55A868")
    b99 = ax.bar([x + w / 2 for x in xs], [r.rtt_p99_us or 0.0 for r in rtt], w, label="p99", color="#C44E52")
    ax.bar_label(b50, fmt="%.0f", fontsize=8)
    ax.bar_label(b99, fmt="%.0f", fontsize=8)
    ax.set_xticks(xs, [r.label for r in rtt], rotation=25, ha="right", fontsize=9)
    ax.set_title("request/reply RTT (us, lower is better)")
    ax.legend()
    ax.margins(y=0.12)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return ""
