"""A small, strict subset of Go's ``text/template`` plus the Sprig/Helm functions our chart uses.

Helm cannot be installed on the machines that build this project, so ``deploy/render.py`` renders the chart
with this engine to produce the plain manifests in ``deploy/manifests/``. The engine implements exactly the
constructs the chart uses and fails loudly (:class:`TemplateError`) on anything else, so a template that this
engine renders is written in ordinary Helm idiom, and a construct it does not know cannot slip through unseen.

Supported: text with ``{{- ... -}}`` whitespace trimming and ``{{/* comments */}}``; ``if / else if / else``,
``range`` (over lists and maps, with ``$i, $v :=``), ``with``, ``define``, ``include``/``template``;
variables (``$``, ``$x := ...``, ``$x = ...``); pipelines with ``|`` and parentheses; field chains on maps
(``.Values.a.b``) and callables (``.Files.Get "path"``). Functions: see :data:`_FUNCTION_NAMES`.

Semantics follow Go and Helm where they matter for output: Go truthiness, ``and``/``or`` returning operands,
missing map keys printing as the empty string (Helm), ``toYaml`` sorting keys and dropping the final newline,
Sprig's ``indent``/``nindent`` padding every line. Helm parses values.yaml numbers as float64, so an integer
of a million or more would print as ``1e+06``: printing such a value without ``int`` is an error here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml


class TemplateError(Exception):
    """A template could not be parsed or evaluated; the message names the template and the problem."""


# --------------------------------------------------------------------------------------------
# Lexing: text and actions.
# --------------------------------------------------------------------------------------------

_ACTION_RE = re.compile(r"\{\{(-[ \t\r\n])?(.*?)([ \t\r\n]-)?\}\}", re.S)
_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<declare>:=)
  | (?P<assign>=)
  | (?P<pipe>\|)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<comma>,)
  | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.X,
)


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Action:
    body: str
    where: str


def _lex(source: str, name: str) -> list[_Text | _Action]:
    """Split ``source`` into text and actions, applying ``{{-`` / ``-}}`` trimming to the neighbouring text."""
    items: list[_Text | _Action] = []
    pos = 0
    trim_next = False
    for m in _ACTION_RE.finditer(source):
        text = source[pos : m.start()]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if m.group(1):
            text = text.rstrip(" \t\r\n")
        if text:
            items.append(_Text(text))
        line = source.count("\n", 0, m.start()) + 1
        body = m.group(2).strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            items.append(_Action(body, f"{name}:{line}"))
        trim_next = bool(m.group(3))
        pos = m.end()
    text = source[pos:]
    if trim_next:
        text = text.lstrip(" \t\r\n")
    if "{{" in text or "}}" in text:
        raise TemplateError(f"{name}: unbalanced '{{{{' or '}}}}' in text")
    if text:
        items.append(_Text(text))
    return items


# --------------------------------------------------------------------------------------------
# Parse tree.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Literal:
    value: Any


@dataclass(frozen=True, slots=True)
class _Field:
    path: tuple[str, ...]  # () is the dot itself


@dataclass(frozen=True, slots=True)
class _Var:
    name: str  # "$" is the root
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Ident:
    name: str


@dataclass(frozen=True, slots=True)
class _Pipeline:
    decl: tuple[str, ...]  # variables declared (":=") or assigned ("=")
    assign: bool
    commands: tuple[tuple[_Operand, ...], ...]
    where: str


_Operand = _Literal | _Field | _Var | _Ident | _Pipeline


@dataclass(slots=True)
class _Output:
    pipe: _Pipeline


@dataclass(slots=True)
class _If:
    branches: list[tuple[_Pipeline, list[_Node]]]
    otherwise: list[_Node] = field(default_factory=list)


@dataclass(slots=True)
class _Range:
    pipe: _Pipeline
    body: list[_Node]
    otherwise: list[_Node] = field(default_factory=list)


@dataclass(slots=True)
class _With:
    pipe: _Pipeline
    body: list[_Node]
    otherwise: list[_Node] = field(default_factory=list)


@dataclass(slots=True)
class _Include:
    name: str
    pipe: _Pipeline | None


_Node = _Text | _Output | _If | _Range | _With | _Include


def _tokenize(body: str, where: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        m = _TOKEN_RE.match(body, pos)
        if m is None:
            raise TemplateError(f"{where}: cannot read {body[pos:]!r}")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append((kind, m.group()))
        pos = m.end()
    return tokens


def _parse_pipeline(tokens: list[tuple[str, str]], where: str) -> _Pipeline:
    decl: list[str] = []
    assign = False
    # Declarations: "$x :=", "$i, $v :=", "$x =".
    for i, (kind, _text) in enumerate(tokens):
        if kind in ("declare", "assign"):
            names = [t for k, t in tokens[:i] if k != "comma"]
            if not names or any(k not in ("var", "comma") for k, _ in tokens[:i]):
                raise TemplateError(f"{where}: bad variable declaration")
            decl = names
            assign = kind == "assign"
            tokens = tokens[i + 1 :]
            break
    pos = 0

    def pipeline(stop_at_rparen: bool) -> tuple[tuple[_Operand, ...], ...]:
        nonlocal pos
        commands: list[tuple[_Operand, ...]] = []
        current: list[_Operand] = []
        while pos < len(tokens):
            kind, text = tokens[pos]
            pos += 1
            if kind == "pipe":
                if not current:
                    raise TemplateError(f"{where}: empty command before '|'")
                commands.append(tuple(current))
                current = []
            elif kind == "rparen":
                if not stop_at_rparen:
                    raise TemplateError(f"{where}: unexpected ')'")
                break
            elif kind == "lparen":
                inner = pipeline(True)
                current.append(_Pipeline((), False, inner, where))
            else:
                current.append(_operand(kind, text, where))
        else:
            if stop_at_rparen:
                raise TemplateError(f"{where}: missing ')'")
        if not current:
            raise TemplateError(f"{where}: empty pipeline")
        commands.append(tuple(current))
        return tuple(commands)

    commands = pipeline(False)
    return _Pipeline(tuple(decl), assign, commands, where)


def _operand(kind: str, text: str, where: str) -> _Operand:
    if kind == "string":
        return _Literal(json.loads(text))
    if kind == "raw":
        return _Literal(text[1:-1])
    if kind == "number":
        return _Literal(float(text) if "." in text else int(text))
    if kind == "var":
        name, *path = text.split(".")
        return _Var(name, tuple(path))
    if kind == "field":
        return _Field(tuple(p for p in text.split(".") if p))
    if kind == "ident":
        if text in ("true", "false"):
            return _Literal(text == "true")
        if text == "nil":
            return _Literal(None)
        return _Ident(text)
    raise TemplateError(f"{where}: unexpected {text!r}")


_KEYWORDS = frozenset({"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"})


class _Parser:
    def __init__(self, items: list[_Text | _Action], name: str, defines: dict[str, list[_Node]]) -> None:
        self.items = items
        self.pos = 0
        self.name = name
        self.defines = defines

    def parse(self) -> list[_Node]:
        nodes, stop = self._block(top=True)
        assert stop is None
        return nodes

    def _block(self, top: bool = False) -> tuple[list[_Node], _Action | None]:
        """Parse nodes up to an ``else`` or ``end`` action, which is returned (None at end of input)."""
        nodes: list[_Node] = []
        while self.pos < len(self.items):
            item = self.items[self.pos]
            self.pos += 1
            if isinstance(item, _Text):
                nodes.append(item)
                continue
            keyword, rest = _split_keyword(item.body)
            if keyword in ("else", "end"):
                if top:
                    raise TemplateError(f"{item.where}: unexpected {{{{ {keyword} }}}}")
                return nodes, item
            if keyword == "if":
                nodes.append(self._if(rest, item.where))
            elif keyword in ("range", "with"):
                pipe = _parse_pipeline(_tokenize(rest, item.where), item.where)
                body, stop = self._block()
                otherwise: list[_Node] = []
                if stop is not None and _split_keyword(stop.body)[0] == "else":
                    if _split_keyword(stop.body)[1]:
                        raise TemplateError(f"{stop.where}: 'else {keyword}' is not supported")
                    otherwise, stop = self._block()
                self._expect_end(stop, keyword, item.where)
                nodes.append(_Range(pipe, body, otherwise) if keyword == "range" else _With(pipe, body, otherwise))
            elif keyword == "define":
                name = _string_arg(rest, item.where)
                body, stop = self._block()
                self._expect_end(stop, "define", item.where)
                if name in self.defines:
                    raise TemplateError(f"{item.where}: template {name!r} defined twice")
                self.defines[name] = body
            elif keyword == "template":
                tokens = _tokenize(rest, item.where)
                if not tokens or tokens[0][0] != "string":
                    raise TemplateError(f"{item.where}: template needs a quoted name")
                arg = _parse_pipeline(tokens[1:], item.where) if len(tokens) > 1 else None
                nodes.append(_Include(json.loads(tokens[0][1]), arg))
            elif keyword in _KEYWORDS:
                raise TemplateError(f"{item.where}: {{{{ {keyword} }}}} is not supported by this renderer")
            else:
                nodes.append(_Output(_parse_pipeline(_tokenize(item.body, item.where), item.where)))
        if not top:
            raise TemplateError(f"{self.name}: unexpected end of template: missing {{{{ end }}}}")
        return nodes, None

    def _if(self, rest: str, where: str) -> _If:
        node = _If([])
        cond = _parse_pipeline(_tokenize(rest, where), where)
        while True:
            body, stop = self._block()
            node.branches.append((cond, body))
            if stop is None:
                raise TemplateError(f"{where}: missing {{{{ end }}}}")
            keyword, tail = _split_keyword(stop.body)
            if keyword == "end":
                return node
            sub, sub_rest = _split_keyword(tail)
            if sub == "if":
                cond = _parse_pipeline(_tokenize(sub_rest, stop.where), stop.where)
                continue
            if tail:
                raise TemplateError(f"{stop.where}: 'else {tail}' is not supported")
            node.otherwise, stop = self._block()
            self._expect_end(stop, "if", where)
            return node

    @staticmethod
    def _expect_end(stop: _Action | None, what: str, where: str) -> None:
        if stop is None or _split_keyword(stop.body) != ("end", ""):
            raise TemplateError(f"{where}: {{{{ {what} }}}} is missing its {{{{ end }}}}")


def _split_keyword(body: str) -> tuple[str, str]:
    word, _, rest = body.partition(" ")
    if word in _KEYWORDS:
        return word, rest.strip()
    return "", body


def _string_arg(rest: str, where: str) -> str:
    tokens = _tokenize(rest, where)
    if len(tokens) != 1 or tokens[0][0] != "string":
        raise TemplateError(f"{where}: expected one quoted name")
    value = json.loads(tokens[0][1])
    assert isinstance(value, str)
    return value


# --------------------------------------------------------------------------------------------
# Values and functions.
# --------------------------------------------------------------------------------------------


class GoInt(int):
    """An integer that prints as an integer (the result of ``int``), unlike Helm's float64 values."""


def truthy(value: Any) -> bool:
    """Go template truth: false, 0, nil and empty strings, lists and maps are false."""
    if value is None:
        return False
    if isinstance(value, bool | int | float | str | list | tuple | dict):
        return bool(value)
    return True


def go_print(value: Any) -> str:
    """How ``{{ value }}`` prints in Helm: nil prints empty, booleans lower-case."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, GoInt):
        return str(int(value))
    if isinstance(value, int):
        if abs(value) >= 1_000_000:
            raise TemplateError(f"Helm would print {value} as a float (1e+06 style): pipe it through int")
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1_000_000 else repr(value)
    if isinstance(value, str):
        return value
    raise TemplateError(f"cannot print a {type(value).__name__} directly: use toYaml or toJson")


class _BlockDumper(yaml.SafeDumper):
    """PyYAML dumper that writes multi-line strings as literal blocks, as Helm's ``toYaml`` does."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)
_BlockDumper.add_representer(GoInt, lambda d, v: d.represent_int(int(v)))


def to_yaml(value: Any) -> str:
    """Helm's ``toYaml``: block style, sorted keys, no trailing newline."""
    text = yaml.dump(value, Dumper=_BlockDumper, default_flow_style=False, sort_keys=True, width=1 << 30)
    if text.endswith("\n...\n"):
        text = text[: -len("\n...\n")]
    return text.removesuffix("\n")


def _indent(width: int, text: Any) -> str:
    pad = " " * int(width)
    return pad + str(text).replace("\n", "\n" + pad)


def _default(fallback: Any, *given: Any) -> Any:
    if not given:
        return fallback
    return given[0] if truthy(given[0]) else fallback


def _required(message: str, value: Any) -> Any:
    if value is None or (isinstance(value, str) and not value):
        raise TemplateError(f"required: {message}")
    return value


def _printf(fmt: str, *args: Any) -> str:
    out: list[str] = []
    it = iter(args)
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        verb = fmt[i + 1 : i + 2]
        i += 2
        if verb == "%":
            out.append("%")
            continue
        try:
            arg = next(it)
        except StopIteration:
            raise TemplateError(f"printf {fmt!r}: missing argument") from None
        if verb in ("s", "v"):
            out.append(go_print(arg))
        elif verb == "d":
            out.append(str(int(arg)))
        elif verb == "q":
            out.append(json.dumps(go_print(arg), ensure_ascii=False))
        else:
            raise TemplateError(f"printf {fmt!r}: verb %{verb} is not supported")
    return "".join(out)


def _go_sprint(*args: Any) -> str:
    """Go's ``fmt.Sprint``: a space between operands when neither side is a string."""
    out = ""
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out += " "
        out += go_print(arg)
    return out


def _eq(a: Any, *others: Any) -> bool:
    return any(a == b for b in others)


def _and(*args: Any) -> Any:
    for arg in args:
        if not truthy(arg):
            return arg
    return args[-1]


def _or(*args: Any) -> Any:
    for arg in args:
        if truthy(arg):
            return arg
    return args[-1]


def _dict(*pairs: Any) -> dict[str, Any]:
    if len(pairs) % 2:
        raise TemplateError("dict needs key/value pairs")
    return {str(pairs[i]): pairs[i + 1] for i in range(0, len(pairs), 2)}


def _trunc(length: int, text: str) -> str:
    return text[: int(length)] if length >= 0 else text[int(length) :]


def _has_key(mapping: Mapping[str, Any], key: str) -> bool:
    return key in mapping


def _index(collection: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(collection, Mapping):
            collection = collection.get(key)
        elif isinstance(collection, list | tuple) and isinstance(key, int) and 0 <= key < len(collection):
            collection = collection[key]
        else:
            raise TemplateError(f"index: cannot index {type(collection).__name__} with {key!r}")
    return collection


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "toYaml": to_yaml,
    "toJson": lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True),
    "indent": _indent,
    "nindent": lambda w, t: "\n" + _indent(w, t),
    "quote": lambda *v: " ".join(json.dumps(go_print(x), ensure_ascii=False) for x in v if x is not None),
    "squote": lambda *v: " ".join("'" + go_print(x) + "'" for x in v if x is not None),
    "default": _default,
    "required": _required,
    "printf": _printf,
    "print": _go_sprint,
    "trunc": _trunc,
    "trimSuffix": lambda suffix, s: s.removesuffix(suffix),
    "trimPrefix": lambda prefix, s: s.removeprefix(prefix),
    "replace": lambda old, new, s: s.replace(old, new),
    "contains": lambda needle, s: needle in s,
    "hasPrefix": lambda prefix, s: s.startswith(prefix),
    "upper": lambda s: s.upper(),
    "lower": lambda s: s.lower(),
    "eq": _eq,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "not": lambda v: not truthy(v),
    "and": _and,
    "or": _or,
    "empty": lambda v: not truthy(v),
    "list": lambda *v: list(v),
    "dict": _dict,
    "hasKey": _has_key,
    "index": _index,
    "join": lambda sep, items: sep.join(go_print(i) for i in items),
    "int": lambda v: GoInt(int(v)),
    "toString": go_print,
    "b64enc": lambda s: base64.b64encode(str(s).encode()).decode(),
    "sha256sum": lambda s: hashlib.sha256(str(s).encode()).hexdigest(),
    "ternary": lambda a, b, cond: a if truthy(cond) else b,
}
_FUNCTION_NAMES = frozenset(_FUNCTIONS) | {"include"}


# --------------------------------------------------------------------------------------------
# Evaluation.
# --------------------------------------------------------------------------------------------


class Engine:
    """Parses a set of named templates (sharing one namespace of ``define``s) and renders them."""

    def __init__(self) -> None:
        self._defines: dict[str, list[_Node]] = {}
        self._files: dict[str, list[_Node]] = {}
        self._depth = 0

    def add(self, name: str, source: str) -> None:
        """Parse a template file; its ``define`` blocks become available to every template."""
        nodes = _Parser(_lex(source, name), name, self._defines).parse()
        self._files[name] = nodes
        self._defines.setdefault(name, nodes)  # Helm: a file can be included by its path

    def render(self, name: str, context: Any) -> str:
        """Render the template file ``name`` with ``context`` as both ``.`` and ``$``."""
        if name not in self._files:
            raise TemplateError(f"no template file {name!r}")
        out: list[str] = []
        self._exec(self._files[name], context, [{"$": context}], out)
        return "".join(out)

    def _include(self, name: str, context: Any) -> str:
        body = self._defines.get(name)
        if body is None:
            raise TemplateError(f"include: no template named {name!r}")
        self._depth += 1
        if self._depth > 50:
            raise TemplateError(f"include: recursion too deep in {name!r}")
        try:
            out: list[str] = []
            self._exec(body, context, [{"$": context}], out)
            return "".join(out)
        finally:
            self._depth -= 1

    def _exec(self, nodes: Sequence[_Node], dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Output):
                value = self._pipeline(node.pipe, dot, scopes)
                if not node.pipe.decl:
                    try:
                        out.append(go_print(value))
                    except TemplateError as e:
                        raise TemplateError(f"{node.pipe.where}: {e}") from None
            elif isinstance(node, _If):
                for cond, body in node.branches:
                    if truthy(self._pipeline(cond, dot, scopes)):
                        self._exec(body, dot, [*scopes, {}], out)
                        break
                else:
                    self._exec(node.otherwise, dot, [*scopes, {}], out)
            elif isinstance(node, _With):
                value = self._pipeline(node.pipe, dot, [*scopes, {}])
                if truthy(value):
                    self._exec(node.body, value, [*scopes, {}], out)
                else:
                    self._exec(node.otherwise, dot, [*scopes, {}], out)
            elif isinstance(node, _Range):
                self._range(node, dot, scopes, out)
            else:
                arg = self._pipeline(node.pipe, dot, scopes) if node.pipe is not None else None
                out.append(self._include(node.name, arg))

    def _range(self, node: _Range, dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        pipe = node.pipe
        bare = _Pipeline((), False, pipe.commands, pipe.where)
        value = self._pipeline(bare, dot, scopes)
        items: list[tuple[Any, Any]]
        if value is None:
            items = []
        elif isinstance(value, dict):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        else:
            raise TemplateError(f"{pipe.where}: range over a {type(value).__name__}")
        if not items:
            self._exec(node.otherwise, dot, [*scopes, {}], out)
            return
        for key, item in items:
            scope: dict[str, Any] = {}
            if len(pipe.decl) == 1:
                scope[pipe.decl[0]] = item
            elif len(pipe.decl) == 2:
                scope[pipe.decl[0]] = key
                scope[pipe.decl[1]] = item
            self._exec(node.body, item, [*scopes, scope], out)

    def _pipeline(self, pipe: _Pipeline, dot: Any, scopes: list[dict[str, Any]]) -> Any:
        value: Any = None
        for i, command in enumerate(pipe.commands):
            value = self._command(command, dot, scopes, pipe.where, (value,) if i else ())
        if pipe.decl:
            if pipe.assign:
                name = pipe.decl[0]
                for scope in reversed(scopes):
                    if name in scope:
                        scope[name] = value
                        break
                else:
                    raise TemplateError(f"{pipe.where}: assignment to undeclared variable {name}")
            elif len(pipe.decl) == 1:
                scopes[-1][pipe.decl[0]] = value
        return value

    def _command(
        self, command: tuple[_Operand, ...], dot: Any, scopes: list[dict[str, Any]], where: str, piped: tuple[Any, ...]
    ) -> Any:
        head, *rest = command
        if isinstance(head, _Ident):
            args = [self._operand(a, dot, scopes, where) for a in rest] + list(piped)
            if head.name == "include":
                if len(args) != 2 or not isinstance(args[0], str):
                    raise TemplateError(f"{where}: include needs a name and a context")
                return self._include(args[0], args[1])
            function = _FUNCTIONS.get(head.name)
            if function is None:
                raise TemplateError(f"{where}: function {head.name!r} is not supported by this renderer")
            try:
                return function(*args)
            except TemplateError as e:
                raise TemplateError(f"{where}: {e}") from None
            except (TypeError, ValueError, AttributeError) as e:
                raise TemplateError(f"{where}: {head.name}: {e}") from None
        value = self._operand(head, dot, scopes, where)
        if callable(value):
            args = [self._operand(a, dot, scopes, where) for a in rest] + list(piped)
            return value(*args)
        if rest or piped:
            raise TemplateError(f"{where}: can't give arguments to a non-function")
        return value

    def _operand(self, operand: _Operand, dot: Any, scopes: list[dict[str, Any]], where: str) -> Any:
        if isinstance(operand, _Literal):
            return operand.value
        if isinstance(operand, _Field):
            return _walk(dot, operand.path, where)
        if isinstance(operand, _Var):
            for scope in reversed(scopes):
                if operand.name in scope:
                    return _walk(scope[operand.name], operand.path, where)
            raise TemplateError(f"{where}: undefined variable {operand.name}")
        if isinstance(operand, _Pipeline):
            return self._pipeline(operand, dot, scopes)
        if operand.name in _FUNCTION_NAMES:
            return self._command((operand,), dot, scopes, where, ())
        raise TemplateError(f"{where}: function {operand.name!r} is not supported by this renderer")


def _walk(value: Any, path: tuple[str, ...], where: str) -> Any:
    for i, key in enumerate(path):
        if isinstance(value, Mapping):
            value = value.get(key)
        elif value is None:
            raise TemplateError(f"{where}: nil pointer evaluating .{'.'.join(path[: i + 1])}")
        else:
            raise TemplateError(f"{where}: can't evaluate field {key} in a {type(value).__name__}")
    return value
