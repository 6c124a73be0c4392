"""Benchmark of the console scripts' start-up: how long a command takes before it answers, median of N runs.

Run: ``.venv/bin/python -m benchmarks.bench_cli [--runs 15]``. Prints figures only. Each case is a fresh process
(``vgpu-scheduler`` / ``kubectl-vgpu`` from the environment's ``bin``, or ``python -m`` when they are not installed),
timed from ``fork`` to exit with its output read through a pipe; ``python -c pass`` is the interpreter's own floor.
The machine's load moves every figure: compare rows of one run, and read the load average printed first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("python -c pass (floor)", ("{python}", "-c", "pass")),
    ("vgpu-scheduler --help", ("{cli}", "--help")),
    ("vgpu-scheduler --version", ("{cli}", "--version")),
    ("vgpu-scheduler simulate --help", ("{cli}", "simulate", "--help")),
    ("vgpu-scheduler usage --bogus (argument error)", ("{cli}", "usage", "--bogus")),
    ("vgpu-scheduler extender (config error)", ("{cli}", "extender")),
    ("kubectl-vgpu --help", ("{kubectl}", "--help")),
    ("kubectl-vgpu explain --help", ("{kubectl}", "explain", "--help")),
)


def _script(name: str, module_call: list[str]) -> list[str]:
    installed = Path(sys.executable).parent / name
    if installed.exists():
        return [str(installed)]
    found = shutil.which(name)
    return [found] if found else module_call


def _argv(template: tuple[str, ...]) -> list[str]:
    cli = _script("vgpu-scheduler", [sys.executable, "-m", "vgpu_scheduler.services.cli"])
    kubectl = _script(
        "kubectl-vgpu",
        [
            sys.executable,
            "-c",
            "import sys; from vgpu_scheduler.services.inspect.command import kubectl_main; sys.exit(kubectl_main())",
        ],
    )
    out: list[str] = []
    for part in template:
        if part == "{cli}":
            out += cli
        elif part == "{kubectl}":
            out += kubectl
        elif part == "{python}":
            out.append(sys.executable)
        else:
            out.append(part)
    return out


def time_once(argv: list[str]) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VGPU_")}
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, check=False, env=env, timeout=120)
    return time.perf_counter() - started, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per case (the median is printed) [15]")
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"start-up, median of {args.runs} runs; load average {load:.2f} on {os.cpu_count()} CPUs")
    print(f"{'command':<48} {'median':>9} {'min':>9} {'max':>9}  exit")
    for label, template in CASES:
        argv = _argv(template)
        time_once(argv)  # warm the file cache
        runs = [time_once(argv) for _ in range(args.runs)]
        times = [t for t, _ in runs]
        codes = sorted({c for _, c in runs})
        print(
            f"{label:<48} {statistics.median(times) * 1000:>7.0f}ms {min(times) * 1000:>7.0f}ms "
            f"{max(times) * 1000:>7.0f}ms  {','.join(map(str, codes))}"
        )


if __name__ == "__main__":
    main()
