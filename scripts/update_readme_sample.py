"""Regenerate the sample output of ``vgpu-scheduler simulate`` shown in README.md and docs/simulate.md.

The block between ``<!-- simulate-sample:begin -->`` and ``<!-- simulate-sample:end -->`` in each file is the
comparison tables that command one of the README prints (``vgpu-scheduler simulate``: the bundled example, default
flags), from its first ``NODE`` header to the per-vendor table. A test (tests/integration/simulate/
test_readme_sample.py) runs the command and fails when a block is not what it prints.

    python scripts/update_readme_sample.py          # run the simulation, rewrite both blocks in place
    python scripts/update_readme_sample.py --check  # exit 1 if a block is out of date
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = (REPO / "README.md", REPO / "docs" / "simulate.md")
BEGIN = "<!-- simulate-sample:begin -->"
END = "<!-- simulate-sample:end -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n```\n(.*?)```\n" + re.escape(END), re.S)

VARYING_COLUMNS = ("LOCK WAITS",)
"""Columns of the comparison whose figures may differ between runs (and are compared loosely)."""


def run_command_one() -> str:
    """``vgpu-scheduler simulate`` (no arguments) in this process: its standard output."""
    from vgpu_scheduler.services import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["simulate"])
    if code != 0:
        raise RuntimeError(f"vgpu-scheduler simulate exited {code}: {err.getvalue().strip()}")
    return out.getvalue()


def sample_of(output: str) -> str:
    """The tables of a comparison's text output: from the first ``NODE`` header to the footer paragraph."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE "))
    end = next(i for i, line in enumerate(lines) if line.startswith("GPU MEM/CORES:"))
    return "\n".join(lines[start:end]).strip("\n") + "\n"


def block_of(doc: str) -> str:
    """The sample block of a document (ValueError when it has none)."""
    found = _BLOCK.search(doc)
    if found is None:
        raise ValueError(f"no {BEGIN} ... {END} block with a code fence")
    return found.group(1)


def with_block(doc: str, sample: str) -> str:
    block_of(doc)
    return _BLOCK.sub(lambda _: f"{BEGIN}\n```\n{sample}```\n{END}", doc, count=1)


def table_cells(sample: str) -> list[dict[str, str]]:
    """The first table of a sample as rows of ``{column: value}`` (columns split on two or more spaces)."""
    lines = sample.splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?:(?<=  )|^)\S", header)]
    names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
    rows = []
    for line in lines[1:]:
        if not line.strip():
            break
        values = re.split(r"\s{2,}", line.strip())
        rows.append(dict(zip(names, values, strict=False)))
    return rows


def same_but_varying(a: str, b: str) -> bool:
    """Whether two samples agree in everything but the :data:`VARYING_COLUMNS` of the comparison table."""
    if a == b:
        return True

    def fixed(sample: str) -> tuple[list[dict[str, str]], str]:
        rows = [{k: v for k, v in r.items() if k not in VARYING_COLUMNS} for r in table_cells(sample)]
        rest = sample[sample.index("\n\n") :] if "\n\n" in sample else ""
        return rows, rest

    return fixed(a) == fixed(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the blocks are up to date")
    args = parser.parse_args(argv)
    sample = sample_of(run_command_one())
    stale = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        if args.check:
            if not same_but_varying(block_of(text), sample):
                stale.append(path)
        else:
            path.write_text(with_block(text, sample), encoding="utf-8")
            print(f"updated {path.relative_to(REPO)}")
    for path in stale:
        print(f"{path} is out of date: run python scripts/update_readme_sample.py", file=sys.stderr)
    if args.check and not stale:
        print(sample, end="")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
