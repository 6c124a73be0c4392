"""``hami.io/node-nvidia-score``: topology pair scores between a node's GPUs (hami-wire §2.3).

``[{"uuid":"GPU-a","score":{"GPU-b":1260,"GPU-c":20}},…]``. A present but unparsable value makes HAMi fail the
node's whole NVIDIA registration, so every malformed value is a DecodeError. ``null`` is an empty table, as in Go.
When a UUID is listed twice, HAMi uses the first entry, and an entry without a uuid matches no device; so here.
"""

from __future__ import annotations

from collections.abc import Mapping

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import (
    INT64_MAX,
    INT64_MIN,
    dump_array,
    dump_object,
    dump_str,
    fail,
    json_int,
    json_list,
    json_map_pairs,
    json_str,
    loads,
    struct_fields,
)

WHAT = keys.NODE_NVIDIA_SCORE


def decode_topology(value: str) -> Mapping[str, Mapping[str, int]]:
    """Decode to ``scores[uuid][other_uuid] = pair score``; pairs not listed score 0 (the caller's lookup)."""
    doc = loads(value, WHAT)
    if doc is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    for i, entry in enumerate(json_list(doc, WHAT)):
        what = f"{WHAT}[{i}]"
        f = struct_fields({} if entry is None else entry, ("uuid", "score"), what)
        uuid = json_str(f.get("uuid", ""), f"{what}.uuid")
        scores: dict[str, int] = {}
        for other, score in json_map_pairs(f.get("score", {}), f"{what}.score"):
            # a null map value stores the zero value, as Go does
            scores[other] = 0 if score is None else json_int(score, INT64_MIN, INT64_MAX, f"{what}.score[{other}]")
        if uuid != "":  # an entry without a uuid matches no device: HAMi ignores it
            out.setdefault(uuid, scores)
    return out


def encode_topology(scores: Mapping[str, Mapping[str, int]]) -> str:
    """Encode as the device plugin does: entries in the mapping's order, score keys sorted (Go map order),
    an empty score map omitted (``omitempty``)."""
    items = []
    for uuid, row in scores.items():
        if uuid == "":
            fail(WHAT, "cannot encode an entry without a uuid")
        pairs = [("uuid", dump_str(uuid))]
        if row:
            pairs.append(("score", dump_object([(k, str(row[k])) for k in sorted(row, key=_go_order)])))
        items.append(dump_object(pairs))
    return dump_array(items)


def _go_order(key: str) -> bytes:
    """Go sorts map keys by their UTF-8 bytes."""
    return key.encode("utf-8", "surrogatepass")
