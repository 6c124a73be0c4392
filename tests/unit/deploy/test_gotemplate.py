"""The Go-template subset that renders the Helm chart: Go/Helm semantics where output depends on them, and a
clear TemplateError for anything outside the subset (so the chart cannot silently use what we cannot render)."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.gotemplate import Engine, TemplateError, to_yaml


def render(source: str, context: Any = None, defines: str = "") -> str:
    engine = Engine()
    if defines:
        engine.add("helpers.tpl", defines)
    engine.add("t", source)
    return engine.render("t", context if context is not None else {})


VALUES = {
    "Values": {
        "name": "x",
        "n": 3,
        "flag": True,
        "off": False,
        "empty": "",
        "items": ["a", "b"],
        "map": {"b": 2, "a": 1},
        "nested": {"k": {"v": "deep"}},
        "big": 1_000_000,
    },
    "Release": {"Name": "rel", "Namespace": "ns"},
}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("a {{ .Values.name }} b", "a x b", id="field"),
        pytest.param("{{ .Values.nested.k.v }}", "deep", id="field-chain"),
        pytest.param("[{{ .Values.missing }}]", "[]", id="missing-key-prints-empty"),
        pytest.param("{{ .Values.flag }} {{ .Values.off }}", "true false", id="bools-print-lowercase"),
        pytest.param("a  \n  {{- .Values.name -}}  \n  b", "axb", id="trim-both-sides"),
        pytest.param("a {{- /* comment */}} b", "a b", id="comment-with-left-trim"),
        pytest.param("{{ if .Values.flag }}y{{ else }}n{{ end }}", "y", id="if-true"),
        pytest.param("{{ if .Values.empty }}y{{ else }}n{{ end }}", "n", id="if-empty-string-false"),
        pytest.param("{{ if .Values.off }}1{{ else if .Values.n }}2{{ else }}3{{ end }}", "2", id="else-if"),
        pytest.param("{{ range .Values.items }}<{{ . }}>{{ end }}", "<a><b>", id="range-list"),
        pytest.param("{{ range $i, $v := .Values.items }}{{ $i }}={{ $v }};{{ end }}", "0=a;1=b;", id="range-index"),
        pytest.param("{{ range $k, $v := .Values.map }}{{ $k }}{{ $v }}{{ end }}", "a1b2", id="range-map-sorted"),
        pytest.param("{{ range .Values.missing }}x{{ else }}none{{ end }}", "none", id="range-else"),
        pytest.param("{{ with .Values.nested.k }}{{ .v }}{{ end }}", "deep", id="with-sets-dot"),
        pytest.param("{{ with .Values.empty }}x{{ else }}e{{ end }}", "e", id="with-else"),
        pytest.param("{{ $x := .Values.name }}{{ $x }}{{ $x }}", "xx", id="variable"),
        pytest.param("{{ with .Values.nested }}{{ $.Values.name }}{{ end }}", "x", id="root-variable"),
        pytest.param('{{ .Values.missing | default "d" }}', "d", id="default-piped"),
        pytest.param('{{ .Values.name | default "d" }}', "x", id="default-keeps-value"),
        pytest.param("{{ .Values.name | quote }}", '"x"', id="quote"),
        pytest.param('{{ printf "%s-%d" .Values.name .Values.n }}', "x-3", id="printf"),
        pytest.param('{{ "abcdef" | trunc 3 }}', "abc", id="trunc"),
        pytest.param('{{ "ab-" | trimSuffix "-" }}', "ab", id="trimSuffix"),
        pytest.param('{{ contains "el" .Release.Name }}', "true", id="contains-needle-first"),
        pytest.param("{{ and .Values.flag .Values.name }}", "x", id="and-returns-operand"),
        pytest.param("{{ or .Values.empty .Values.off }}", "false", id="or-returns-last"),
        pytest.param("{{ not .Values.flag }}", "false", id="not"),
        pytest.param('{{ eq .Values.name "x" }}', "true", id="eq"),
        pytest.param("{{ .Values.big | int }}", "1000000", id="int-prints-plainly"),
        pytest.param("{{ index .Values.items 1 }}", "b", id="index"),
        pytest.param('{{ ternary "a" "b" .Values.off }}', "b", id="ternary"),
    ],
)
def test_subset_semantics(source: str, expected: str) -> None:
    assert render(source, VALUES) == expected


def test_nindent_pads_every_line_after_a_newline() -> None:
    assert render('{{ "a\\nb" | nindent 2 }}', VALUES) == "\n  a\n  b"


def test_include_passes_its_argument_as_dot_and_dollar() -> None:
    defines = '{{- define "greet" -}}hi {{ .who }}/{{ $.who }}{{- end }}'
    assert render('{{ include "greet" (dict "who" .Values.name) }}', VALUES, defines) == "hi x/x"


def test_a_file_can_be_included_by_its_name() -> None:
    engine = Engine()
    engine.add("chart/templates/a.yaml", "A={{ .Values.name }}")
    engine.add("chart/templates/b.yaml", '{{ include "chart/templates/a.yaml" . | sha256sum | trunc 8 }}')
    assert len(engine.render("chart/templates/b.yaml", VALUES)) == 8


def test_callable_fields_are_called_with_arguments() -> None:
    context = {"Files": {"Get": lambda path: f"<{path}>"}}
    assert render('{{ .Files.Get "files/x.json" }}', context) == "<files/x.json>"


def test_to_yaml_sorts_keys_uses_blocks_and_drops_the_final_newline() -> None:
    assert to_yaml({"b": [1, 2], "a": {"y": "1", "x": True}}) == "a:\n  x: true\n  y: '1'\nb:\n- 1\n- 2"
    assert to_yaml({"s": "l1\nl2\n"}) == "s: |\n  l1\n  l2"
    assert to_yaml({}) == "{}"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param("{{ if .Values.flag }}x", "missing", id="unclosed-if"),
        pytest.param("{{ end }}", "unexpected", id="stray-end"),
        pytest.param("{{ .Values.name | upperFirst }}", "not supported", id="unknown-function"),
        pytest.param('{{ block "x" . }}{{ end }}', "not supported", id="unsupported-keyword"),
        pytest.param("{{ .Values.missing.deeper }}", "nil pointer", id="field-of-nil"),
        pytest.param("{{ .Values.big }}", "float", id="large-number-prints-as-float-in-helm"),
        pytest.param("{{ .Values.map }}", "toYaml", id="map-printed-directly"),
        pytest.param("{{ $nope }}", "undefined variable", id="undefined-variable"),
        pytest.param('{{ include "nope" . }}', "no template", id="unknown-include"),
        pytest.param('{{ required "need it" .Values.empty }}', "need it", id="required"),
        pytest.param("a }} b", "unbalanced", id="unbalanced-braces"),
        pytest.param('{{ .Values.name "arg" }}', "non-function", id="arguments-to-a-value"),
        pytest.param('{{ (dict "k" .Values.name).k }}', "non-function", id="field-of-a-pipeline-unsupported"),
    ],
)
def test_outside_the_subset_or_broken_is_a_clear_error(source: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        render(source, VALUES)


def test_defining_a_template_twice_is_an_error() -> None:
    with pytest.raises(TemplateError, match="defined twice"):
        render('{{ define "x" }}1{{ end }}{{ define "x" }}2{{ end }}')
