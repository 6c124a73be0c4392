"""PNG charts of a run or a comparison (``--plot DIR``), drawn with matplotlib (the optional ``plot`` extra).

Each chart is meant to be put in a design review as it is: a title saying what is compared, axis titles, the value
written on every bar, the legend outside the bars, and a caption naming the cluster and the workload.

* ``placement.png``: placed and pending pods per policy combination (stacked);
* ``utilisation.png``: GPU memory and GPU cores allocated, as a share of the usable devices;
* ``fragmentation.png``: free GPU memory stranded on partly used cards, as a share of all free GPU memory;
* ``nodes.png``: nodes touched by the workload;
* ``contention.png``: binds retried after kube-scheduler's backoff and binds that waited for a node lock.

Combinations are drawn as horizontal bars (one row each, labels readable at any count); a single run gets the same
charts with one row of a fixed height, never one bar filling the picture.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vgpu_scheduler.shared.errors import ConfigError

PLOT_FILES = ("placement.png", "utilisation.png", "fragmentation.png", "nodes.png", "contention.png")

MISSING_MESSAGE = (
    "--plot needs matplotlib, which is not installed: pip install matplotlib "
    "(or, in a checkout of vgpu-scheduler: pip install -e '.[plot]')"
)

_GREEN, _RED, _BLUE, _AMBER, _PURPLE, _TEAL, _GREY = (
    "#4c8c4a",
    "#c8553d",
    "#3d6fc8",
    "#e0a030",
    "#8c4a8c",
    "#4a8c8c",
    "#888888",
)
_ROW_HEIGHT_IN = 0.55
_DPI = 110


def load_pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend; ConfigError with the install hint when missing."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise ConfigError(MISSING_MESSAGE) from None
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def check_directory(directory: str | Path) -> Path:
    """Create ``directory`` if needed; ConfigError when it cannot be written."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--plot: cannot create directory {str(path)!r}: {e.strerror or e}") from None
    if not path.is_dir():
        raise ConfigError(f"--plot: {str(path)!r} is not a directory")
    return path


class _Charts:
    """Horizontal bar charts, one row per run, sharing the labels, the caption and the output directory."""

    def __init__(self, plt: Any, labels: Sequence[str], caption: str, out: Path) -> None:
        self.plt = plt
        self.labels = list(labels)
        self.caption = caption
        self.out = out
        self.written: list[Path] = []
        self.rows = list(range(len(labels)))

    def figure(self, subtitle: str = "") -> tuple[Any, Any]:
        height = 1.9 + _ROW_HEIGHT_IN * max(len(self.labels), 2)
        fig, ax = self.plt.subplots(figsize=(9.0, height))
        ax.set_yticks(self.rows)
        ax.set_yticklabels(self.labels)
        ax.invert_yaxis()  # the first run on top, in run order
        ax.set_ylabel("policy (node / GPU)")
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if len(self.labels) == 1:
            ax.set_ylim(0.8, -0.8)  # one row keeps a bar's height, never fills the picture
        return fig, ax

    def label_bars(self, ax: Any, bars: Any, texts: Sequence[str], *, inside: bool = False) -> None:
        ax.bar_label(
            bars,
            labels=list(texts),
            label_type="center" if inside else "edge",
            padding=0 if inside else 3,
            fontsize=9,
            color="white" if inside else "black",
        )

    def finish(self, fig: Any, ax: Any, title: str, xlabel: str, name: str, *, legend: bool = False) -> None:
        ax.set_title(title, loc="left", fontsize=12, fontweight="bold")
        ax.set_xlabel(xlabel)
        if legend:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        fig.text(0.01, 0.01, self.caption, fontsize=8, color=_GREY, ha="left", va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        path = self.out / name
        fig.savefig(path, dpi=_DPI)
        self.plt.close(fig)
        self.written.append(path)


def _bar_height(n: int) -> float:
    return 0.6 if n > 1 else 0.5


def write_plots(
    labels: Sequence[str], summaries: Sequence[dict[str, Any]], directory: str | Path, *, caption: str = ""
) -> list[Path]:
    """Draw the charts for the runs (``labels[i]`` names ``summaries[i]``); return the files written.

    ``caption`` (the cluster and the workload) is printed under every chart.
    """
    plt = load_pyplot()
    out = check_directory(directory)
    charts = _Charts(plt, labels, caption or "vgpu-scheduler simulate", out)
    rows, h = charts.rows, _bar_height(len(labels))
    total = max([int(s["pods"]) for s in summaries] + [1])

    placed = [int(s["placed"]) for s in summaries]
    pending = [int(s["pending"]) for s in summaries]
    fig, ax = charts.figure()
    bars = ax.barh(rows, placed, h, label="placed", color=_GREEN)
    charts.label_bars(ax, bars, [str(v) if v else "" for v in placed], inside=True)
    bars = ax.barh(rows, pending, h, left=placed, label="pending", color=_RED)
    charts.label_bars(ax, bars, [str(v) if v else "" for v in pending], inside=True)
    ax.set_xlim(0, total * 1.02)
    charts.finish(fig, ax, f"Pods placed and pending (of {total})", "pods", PLOT_FILES[0], legend=True)

    mem = [s["gpu"]["memory_utilisation"] * 100 for s in summaries]
    cores = [s["gpu"]["core_utilisation"] * 100 for s in summaries]
    fig, ax = charts.figure()
    half = h / 2
    bars = ax.barh([r - half / 2 for r in rows], mem, half, label="GPU memory", color=_BLUE)
    charts.label_bars(ax, bars, [f"{v:.1f}%" for v in mem])
    bars = ax.barh([r + half / 2 for r in rows], cores, half, label="GPU cores", color=_AMBER)
    charts.label_bars(ax, bars, [f"{v:.1f}%" for v in cores])
    ax.set_xlim(0, 110)
    ax.set_xticks(range(0, 101, 20))
    charts.finish(
        fig, ax, "GPU utilisation: allocated / usable", "% of usable devices' capacity", PLOT_FILES[1], legend=True
    )

    frag = [s["fragmentation"]["ratio"] * 100 for s in summaries]
    fig, ax = charts.figure()
    bars = ax.barh(rows, frag, h, color=_PURPLE)
    charts.label_bars(
        ax,
        bars,
        [
            f"{v:.1f}%  ({s['fragmentation']['stranded_memory_mib'] / 1024:.0f} of "
            f"{s['fragmentation']['free_memory_mib'] / 1024:.0f} GiB free)"
            for v, s in zip(frag, summaries, strict=True)
        ],
    )
    ax.set_xlim(0, 135)
    ax.set_xticks(range(0, 101, 20))
    charts.finish(
        fig,
        ax,
        "Fragmentation: free memory on cards in use (lower is better)",
        "% of free GPU memory",
        PLOT_FILES[2],
    )

    touched = [int(s["nodes_touched"]) for s in summaries]
    fig, ax = charts.figure()
    bars = ax.barh(rows, touched, h, color=_TEAL)
    charts.label_bars(ax, bars, [str(v) for v in touched])
    ax.set_xlim(0, max([*touched, 1]) * 1.15)
    charts.finish(fig, ax, "Nodes that received a GPU pod of the workload", "nodes", PLOT_FILES[3])

    retried = [int((s.get("contention") or {}).get("binds_retried", 0)) for s in summaries]
    waits = [int((s.get("contention") or {}).get("lock_waits", 0)) for s in summaries]
    fig, ax = charts.figure()
    bars = ax.barh([r - half / 2 for r in rows], retried, half, label="binds retried after backoff", color=_RED)
    charts.label_bars(ax, bars, [str(v) for v in retried])
    bars = ax.barh([r + half / 2 for r in rows], waits, half, label="binds that waited for a node lock", color=_AMBER)
    charts.label_bars(ax, bars, [str(v) for v in waits])
    ax.set_xlim(0, max([*retried, *waits, 1]) * 1.15)
    charts.finish(fig, ax, "Bind contention (kube-scheduler binds concurrently)", "binds", PLOT_FILES[4], legend=True)
    return charts.written
