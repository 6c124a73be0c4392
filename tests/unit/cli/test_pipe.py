"""Issue 23 item 5: a reader that closes the pipe early (``vgpu-scheduler … | head -1``) ends the command quietly.

Real pipes, real processes: the reader takes one line and closes its end while the command is still writing; the
command must exit with 141 (128 + SIGPIPE, what a shell shows for a coreutils tool killed by SIGPIPE) and print
nothing on stderr: no ``BrokenPipeError`` traceback, no ``Exception ignored`` line from the interpreter's flush.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vgpu_scheduler.services import cli

BIG = """
import sys
from vgpu_scheduler.services import cli
cli.SUBCOMMANDS = ("tests.unit.cli.bigoutput",)
sys.exit(cli.main(sys.argv[1:]))
"""


def read_one_line_and_close(argv: list[str], cwd: Path) -> tuple[str, int, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline().decode()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return first, proc.wait(timeout=60), err


def test_a_closed_pipe_ends_the_command_quietly(repo_root: Path) -> None:
    first, code, err = read_one_line_and_close([sys.executable, "-c", BIG, "big"], repo_root)
    assert first.startswith("line 00000 ")
    assert err == ""
    assert code == cli.EXIT_BROKEN_PIPE == 141


def test_the_whole_output_read_is_success(repo_root: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", BIG, "big"], capture_output=True, cwd=repo_root, check=False)
    assert proc.returncode == 0 and proc.stderr == b""
    assert len(proc.stdout.splitlines()) == 20_000


def test_help_into_a_closed_pipe(repo_root: Path) -> None:
    """``--help`` into a pipe nobody reads: argparse itself ignores the failed write and exits 0; nothing else
    (the final flush) may complain either."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpu_scheduler.services.cli", "simulate", "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=repo_root,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the interpreter has even started: every write fails
    _, err = proc.communicate(timeout=60)
    assert err == b""
    assert proc.returncode == 0
