"""Regenerate the option tables of docs/config.md from shared.config's option table.

python scripts/gen_config_doc.py          # rewrite docs/config.md in place
python scripts/gen_config_doc.py --check  # exit 1 if docs/config.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vgpu_scheduler.shared.config.doc import replace_generated_block

DOC = Path(__file__).resolve().parent.parent / "docs" / "config.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that docs/config.md is up to date")
    args = parser.parse_args(argv)
    current = DOC.read_text(encoding="utf-8")
    wanted = replace_generated_block(current)
    if args.check:
        if current != wanted:
            print(f"{DOC} is out of date: run python scripts/gen_config_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
