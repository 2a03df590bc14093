"""PNG plots of a run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulations.runner import RunResult
from simulations.scenario import Design


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(r: RunResult, out_dir: Path) -> list[Path]:
    """Write the run's plots into ``out_dir``; returns the files written."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    labels = [f"{d.design}\n{d.routing}" for d in r.designs]
    with_files = [d for d in r.designs if d.design != Design.CLASSIC.value]

    # Remote commit RPCs per WAL file: the distribution, per design.
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(1, len(with_files))
    for i, d in enumerate(with_files):
        total = sum(d.commit_remote_histogram.values()) or 1
        xs = [k + i * width for k in d.commit_remote_histogram]
        ax.bar(xs, [v / total for v in d.commit_remote_histogram.values()], width, label=f"{d.design}/{d.routing}")
    ax.set_xlabel("remote commit RPCs per WAL file")
    ax.set_ylabel("fraction of WAL files")
    ax.set_title(f"{r.scenario.name}: commit fan-out")
    ax.legend()
    written.append(save_figure(fig, out_dir / "commit_rpcs_per_file.png"))

    # Over time: fan-out and produce latency p99, with the events marked.
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for d in r.designs:
        label = f"{d.design}/{d.routing}"
        if d.design != Design.CLASSIC.value:
            ax1.plot(range(len(d.timeline_remote_mean)), d.timeline_remote_mean, label=label)
        ax2.plot(range(len(d.timeline_latency_ms_p99)), d.timeline_latency_ms_p99, label=label)
    for ms, _ in r.designs[0].events if r.designs else ():
        for ax in (ax1, ax2):
            ax.axvline(ms / 1000, color="grey", linestyle="--", linewidth=0.8)
    ax1.set_ylabel("remote commit RPCs/file")
    ax2.set_ylabel("produce latency p99 (ms)")
    ax2.set_xlabel("simulated second")
    ax1.legend(fontsize="small")
    ax1.set_title(f"{r.scenario.name}: over time")
    written.append(save_figure(fig, out_dir / "timeline.png"))

    # Cross-AZ bytes, data and metadata.
    fig, ax = plt.subplots(figsize=(8, 4.5))
    data = [d.cross_az_data_bytes_per_s / 1e6 for d in r.designs]
    meta = [d.cross_az_metadata_bytes_per_s / 1e6 for d in r.designs]
    ax.bar(labels, data, label="data")
    ax.bar(labels, meta, bottom=data, label="metadata")
    ax.set_ylabel("cross-AZ MB/s")
    ax.set_title(f"{r.scenario.name}: cross-AZ traffic")
    ax.legend()
    written.append(save_figure(fig, out_dir / "cross_az_bytes.png"))

    # Produce latency percentiles.
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.25
    for j, (name, key) in enumerate(
        (("p50", "latency_ms_p50"), ("p99", "latency_ms_p99"), ("p99.9", "latency_ms_p999"))
    ):
        vals = [getattr(d, key) or 0.0 for d in r.designs]
        ax.bar([i + j * width for i in range(len(r.designs))], vals, width, label=name)
    ax.set_xticks([i + width for i in range(len(r.designs))], labels)
    ax.set_ylabel("produce latency (ms)")
    ax.set_title(f"{r.scenario.name}: produce latency")
    ax.legend()
    written.append(save_figure(fig, out_dir / "produce_latency.png"))
    return written


def write_sweep_plot(
    scenario: str, param: str, metric: str, series: dict[str, list[tuple[float, float | None]]], path: Path
) -> Path:
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in series.items():
        pts = [(x, y) for x, y in points if y is not None]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
    ax.set_xlabel(param)
    ax.set_ylabel(metric)
    ax.set_title(f"{scenario}: {metric} vs {param}")
    ax.legend()
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    plt = pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
