"""PNG charts of a comparison (``--plot DIR``), drawn with matplotlib (the optional ``plot`` extra).

Four bar charts, one bar group per policy combination: ``placement.png`` (placed and pending pods),
``utilisation.png`` (GPU memory and core utilisation), ``fragmentation.png`` (free memory stranded on partly used
cards, as a share of all free memory) and ``nodes.png`` (nodes touched by the workload).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.errors import ConfigError

PLOT_FILES = ("placement.png", "utilisation.png", "fragmentation.png", "nodes.png")

MISSING_MESSAGE = (
    "--plot needs matplotlib, which is not installed: pip install 'vgpu-scheduler[plot]' (or pip install matplotlib)"
)


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


def write_plots(labels: Sequence[str], summaries: Sequence[dict[str, Any]], directory: str | Path) -> list[Path]:
    """Draw the four charts for the runs (``labels[i]`` names ``summaries[i]``); return the files written."""
    plt = load_pyplot()
    out = check_directory(directory)
    x = list(range(len(labels)))
    written: list[Path] = []

    def finish(fig: Any, ax: Any, title: str, ylabel: str, name: str) -> None:
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    placed = [s["placed"] for s in summaries]
    pending = [s["pending"] for s in summaries]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(x, placed, label="placed", color="#4c8c4a")
    ax.bar(x, pending, bottom=placed, label="pending", color="#c8553d")
    ax.legend()
    finish(fig, ax, "Pods placed and pending", "pods", PLOT_FILES[0])

    width = 0.4
    mem = [s["gpu"]["memory_utilisation"] * 100 for s in summaries]
    cores = [s["gpu"]["core_utilisation"] * 100 for s in summaries]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar([i - width / 2 for i in x], mem, width, label="GPU memory", color="#3d6fc8")
    ax.bar([i + width / 2 for i in x], cores, width, label="GPU cores", color="#e0a030")
    ax.set_ylim(0, 100)
    ax.legend()
    finish(fig, ax, "GPU utilisation (allocated / usable)", "%", PLOT_FILES[1])

    frag = [s["fragmentation"]["ratio"] * 100 for s in summaries]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(x, frag, color="#8c4a8c")
    ax.set_ylim(0, 100)
    finish(fig, ax, "Fragmentation: free memory on partly used cards", "% of free GPU memory", PLOT_FILES[2])

    touched = [s["nodes_touched"] for s in summaries]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(x, touched, color="#4a8c8c")
    finish(fig, ax, "Nodes touched by the workload", "nodes", PLOT_FILES[3])
    return written
