"""Render the option table as Markdown for ``docs/config.md`` (kept in sync by ``scripts/gen_config_doc.py``)."""

from __future__ import annotations

from vgpu_scheduler.shared.config.options import OPTIONS, Kind, Option, Service

BEGIN_MARK = "<!-- BEGIN GENERATED OPTIONS (scripts/gen_config_doc.py) -->"
END_MARK = "<!-- END GENERATED OPTIONS -->"

_SERVICE_ORDER = tuple(Service)


def _services(option: Option) -> str:
    if option.services == frozenset(Service):
        return "all"
    return ", ".join(s.value for s in _SERVICE_ORDER if s in option.services)


def _flag(option: Option) -> str:
    flag = f"`{option.flag}`" if option.short is None else f"`{option.short}`, `{option.flag}`"
    if option.kind is Kind.BOOL:
        flag += " [=BOOL]"
    return flag


def _default(option: Option) -> str:
    if option.default is None:
        return "(none)"
    return '`""`' if option.default == "" else f"`{option.default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_options_markdown() -> str:
    """The generated block: one table per option group, between :data:`BEGIN_MARK` and :data:`END_MARK`."""
    lines = [BEGIN_MARK]
    groups: dict[str, list[Option]] = {}
    for option in OPTIONS:
        groups.setdefault(option.group, []).append(option)
    for group, options in groups.items():
        lines += ["", f"### {group.capitalize()}", ""]
        lines += ["| Flag | Environment | Default | Services | Meaning |", "|---|---|---|---|---|"]
        for o in options:
            cells = [_flag(o), f"`{o.env_var}`", _default(o), _services(o), o.help]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += ["", END_MARK]
    return "\n".join(lines) + "\n"


def replace_generated_block(document: str) -> str:
    """``document`` with its generated block replaced by the current one (markers must be present)."""
    start = document.index(BEGIN_MARK)
    end = document.index(END_MARK) + len(END_MARK)
    if document[end : end + 1] == "\n":
        end += 1
    return document[:start] + render_options_markdown() + document[end:]
