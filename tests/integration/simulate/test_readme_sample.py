"""The sample output of ``vgpu-scheduler simulate`` in README.md and docs/simulate.md is what command one prints.

One run of the default comparison (the bundled example, six policy combinations: about half a minute of CPU),
compared with both documents' sample blocks; only the LOCK WAITS column may differ (binds that waited for a node
lock, which vary by a few between runs). When it fails because the figures changed on purpose, regenerate both
blocks with ``python scripts/update_readme_sample.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.update_readme_sample import DOCS, block_of, run_command_one, same_but_varying, sample_of, table_cells


@pytest.fixture(scope="module")
def sample() -> str:
    return sample_of(run_command_one())


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_the_documented_sample_is_what_command_one_prints(sample: str, doc: Path) -> None:
    documented = block_of(doc.read_text(encoding="utf-8"))
    assert same_but_varying(documented, sample), (
        f"{doc.name}'s sample is stale: run python scripts/update_readme_sample.py\n--- printed now:\n{sample}"
    )


def test_the_comparison_has_the_six_default_combinations(sample: str) -> None:
    rows = table_cells(sample)
    assert [(r["NODE"], r["GPU"]) for r in rows] == [
        (node, gpu) for node in ("binpack", "spread") for gpu in ("binpack", "spread", "topology-aware")
    ]


def test_only_the_varying_columns_are_tolerated() -> None:
    head = "NODE     GPU      PLACED  LOCK WAITS\n"
    a = head + "binpack  binpack   79/90          55\n"
    assert same_but_varying(a, head + "binpack  binpack   79/90          57\n")
    assert not same_but_varying(a, head + "binpack  binpack   78/90          55\n")
