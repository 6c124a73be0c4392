"""The documentation stands alone: README.md, docs/ and the code's comments cite only documents in the repository.

HAMi's wire formats live in docs/hami-wire.md and our deliberate differences from HAMi in docs/differences.md.
A citation of a document that is not in the repository (a "compatibility contract", "hami-compat §…",
"decision N", "design §N") must not come back, every "§N" must be a link into docs/hami-wire.md, every
"difference N" must name an item of docs/differences.md, and every link into those two files must land on a
heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
WIRE = DOCS / "hami-wire.md"
DIFFERENCES = DOCS / "differences.md"

FORBIDDEN = [
    (re.compile(r"hami-compat(?!ib)", re.I), "a document outside the repository"),
    (re.compile(r"compatibility contract", re.I), "a document outside the repository"),
    (re.compile(r"\bdecisions? \d", re.I), "numbered decisions of a document outside the repository"),
    (re.compile(r"\bdesign(?:\.md)? §", re.I), "a design document outside the repository"),
    (re.compile(r"\.\./shared\b"), "a folder outside the repository"),
]
WIRE_LINK = re.compile(r"\[[^\]]*\]\((?:docs/)?hami-wire\.md#[^)]*\)")
LINK = re.compile(r"\]\(((?:docs/)?(?:hami-wire|differences|deploy)\.md)?#([^)]+)\)")
DIFFERENCE = re.compile(r"\bdifferences? ((?:\d+(?:, | and |, and )?)+)", re.I)


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    return {slug(h) for h in headings}


def difference_numbers() -> set[int]:
    return {int(n) for n in re.findall(r"^### (\d+)\. ", DIFFERENCES.read_text(encoding="utf-8"), flags=re.M)}


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_no_citation_of_documents_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [
        f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r} ({why})"
        for pattern, why in FORBIDDEN
        for m in pattern.finditer(text)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", [p for p in documents() if p != WIRE], ids=lambda p: p.name)
def test_every_section_sign_is_a_link_into_the_wire_document(path: Path) -> None:
    text = WIRE_LINK.sub("", path.read_text(encoding="utf-8"))
    bare = [line for line in text.splitlines() if "§" in line]
    assert not bare, f"{path.name}: '§' outside a link to docs/hami-wire.md:\n" + "\n".join(bare)


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_links_into_the_wire_and_differences_documents_land_on_headings(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    base = DOCS if path.parent == DOCS else REPO
    broken = []
    for target, anchor in LINK.findall(text):
        file = path if not target else (base / target if (base / target).exists() else DOCS / Path(target).name)
        if anchor not in anchors(file):
            broken.append(f"{target or path.name}#{anchor}")
    assert not broken, f"{path.name}: links to missing headings: {broken}"


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_every_cited_difference_exists(path: Path) -> None:
    known = difference_numbers()
    cited = {int(n) for m in DIFFERENCE.finditer(path.read_text(encoding="utf-8")) for n in re.findall(r"\d+", m[1])}
    assert cited <= known, f"{path.name}: no such difference: {sorted(cited - known)}"


SOURCE_DIRS = ("shared", "services", "tests", "benchmarks", "scripts", "deploy")


def sources() -> list[Path]:
    """Every source file whose comments could cite a document (this test's own patterns excepted)."""
    out = []
    for top in SOURCE_DIRS:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".lua", ".yaml", ".tpl", ".sh") and path != Path(__file__).resolve():
                out.append(path)
    return out


def test_code_comments_cite_only_documents_in_the_repository() -> None:
    """Code comments cite docs/hami-wire.md as "§N" and docs/differences.md as "difference N"."""
    found = []
    for path in sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern, why in FORBIDDEN:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(REPO)}:{line}: {m.group(0)!r} ({why})")
    assert not found, "\n".join(found)


def test_the_differences_are_numbered_without_gaps() -> None:
    numbers = difference_numbers()
    assert numbers == set(range(1, len(numbers) + 1)) and len(numbers) >= 18


def test_the_checks_catch_what_they_look_for() -> None:
    """The patterns are not blind: each forbidden citation form is caught, and a dead anchor is not a heading."""
    for sample in ("see hami-compat §5.3", "§0 of the compatibility contract", "(decision 14)", "design §2"):
        assert any(p.search(sample) for p, _ in FORBIDDEN), sample
    assert "§" not in WIRE_LINK.sub("", "[§6.4](hami-wire.md#64-fit-one-container-on-a-node)")
    assert "§" in WIRE_LINK.sub("", "as §6.4 says")
    assert "64-fit-one-container-on-a-node" in anchors(WIRE)
    assert "64-nvidia-fit" not in anchors(WIRE)
    assert slug("2.1 Device registration: `hami.io/node-nvidia-register`") == (
        "21-device-registration-hamiionode-nvidia-register"
    )
