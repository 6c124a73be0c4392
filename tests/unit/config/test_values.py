"""Go-flavoured value parsers: durations, booleans, listen addresses, selectors, policies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.config import (
    BindAddress,
    format_go_duration,
    parse_bind_address,
    parse_go_bool,
    parse_go_duration,
    parse_gpu_policy,
    parse_label_selector,
    parse_node_policy,
)
from vgpu_scheduler.shared.config.values import parse_int
from vgpu_scheduler.shared.domain.model import GpuPolicyToken, NodePolicy


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("5m", 300.0),
        ("28s", 28.0),
        ("1h2m", 3720.0),
        ("1h2m3s", 3723.0),
        ("300ms", 0.3),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("1500us", 0.0015),
        ("1500\u00b5s", 0.0015),
        ("1500\u03bcs", 0.0015),
        ("2000000ns", 0.002),
        ("+5m", 300.0),
        ("-5m", -300.0),
        ("1m30s", 90.0),
    ],
    ids=repr,
)
def test_go_duration_parses_like_time_parse_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "5 m", "5M", "1d", "5mm", "h1", ".s", "1h 2m", "--5m", "5m-"])
def test_go_duration_rejects_what_go_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="Go duration"):
        parse_go_duration(text)


@given(st.integers(min_value=0, max_value=10**6))
def test_go_duration_format_round_trips_whole_seconds(seconds: int) -> None:
    assert parse_go_duration(format_go_duration(seconds)) == seconds


@given(st.integers(min_value=1, max_value=999))
def test_go_duration_format_round_trips_milliseconds(ms: int) -> None:
    assert parse_go_duration(format_go_duration(ms / 1000)) == pytest.approx(ms / 1000)


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_bool_true(text: str) -> None:
    assert parse_go_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_bool_false(text: str) -> None:
    assert parse_go_bool(text) is False


@pytest.mark.parametrize("text", ["", "yes", "no", "on", "tRUE", "2", " true"])
def test_go_bool_rejects_the_rest(text: str) -> None:
    with pytest.raises(ValueError, match="expected a boolean"):
        parse_go_bool(text)


@pytest.mark.parametrize(
    ("text", "host", "port", "listen_host"),
    [
        (":9395", "", 9395, None),
        ("0.0.0.0:443", "0.0.0.0", 443, "0.0.0.0"),
        ("127.0.0.1:8080", "127.0.0.1", 8080, "127.0.0.1"),
        ("[::1]:80", "::1", 80, "::1"),
        ("[::]:0", "::", 0, "::"),
        ("localhost:65535", "localhost", 65535, "localhost"),
    ],
    ids=repr,
)
def test_bind_address_parses_go_listen_addresses(text: str, host: str, port: int, listen_host: str | None) -> None:
    address = parse_bind_address(text)
    assert address == BindAddress(host, port)
    assert address.listen_host == listen_host
    assert parse_bind_address(str(address)) == address


@pytest.mark.parametrize("text", ["", "9395", "::1:80", "[::1]80", "[]:80", "host:", "host:65536", "host:-1", "h:8x"])
def test_bind_address_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="expected host:port"):
        parse_bind_address(text)


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("", ()),
        ("gpu=on", (("gpu", "on"),)),
        ("gpu=on,zone=a", (("gpu", "on"), ("zone", "a"))),
        (" gpu = on , zone=a ", (("gpu", "on"), ("zone", "a"))),
        ("empty=", (("empty", ""),)),
    ],
)
def test_label_selector(text: str, pairs: tuple[tuple[str, str], ...]) -> None:
    assert parse_label_selector(text) == pairs


@pytest.mark.parametrize("text", ["gpu", "=on", "gpu=on,", "gpu=on,,zone=a"])
def test_label_selector_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="key=value"):
        parse_label_selector(text)


def test_node_policy() -> None:
    assert parse_node_policy("binpack") is NodePolicy.BINPACK
    assert parse_node_policy("spread") is NodePolicy.SPREAD
    with pytest.raises(ValueError, match="binpack or spread"):
        parse_node_policy("topology-aware")


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("spread", (GpuPolicyToken.SPREAD,)),
        ("topology-aware", (GpuPolicyToken.TOPOLOGY_AWARE,)),
        ("mutex", (GpuPolicyToken.MUTEX,)),
        ("numa", (GpuPolicyToken.NUMA,)),
        ("binpack,numa", (GpuPolicyToken.BINPACK, GpuPolicyToken.NUMA)),
        (" numa , spread ", (GpuPolicyToken.NUMA, GpuPolicyToken.SPREAD)),
    ],
)
def test_gpu_policy_single_and_chains(text: str, tokens: tuple[GpuPolicyToken, ...]) -> None:
    assert parse_gpu_policy(text).tokens == tokens


@pytest.mark.parametrize("text", ["", "fast", "binpack,", ",spread", "binpack;numa", "BINPACK"])
def test_gpu_policy_rejects_unknown_tokens(text: str) -> None:
    with pytest.raises(ValueError, match="comma chain"):
        parse_gpu_policy(text)


@pytest.mark.parametrize(
    ("text", "minimum", "maximum", "message"),
    [
        ("x", 0, None, "non-negative integer"),
        ("1.5", 0, None, "non-negative integer"),
        ("1_000", 0, None, "non-negative integer"),
        ("-1", 0, None, "non-negative integer"),
        ("0", 1, None, "positive integer"),
        ("101", 0, 100, "from 0 to 100"),
    ],
)
def test_int_bounds(text: str, minimum: int, maximum: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_int(text, minimum=minimum, maximum=maximum)
