"""Gang membership facts from API objects (shared/codec/gang.py)."""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.shared.codec.gang import (
    cannot_be_whole,
    coscheduling_group,
    coscheduling_min_member,
    gang_min_count,
    live_members,
    pod_group_name,
)


def member(name: str, group: str | None, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": group}} if group else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_membership_of_both_kinds() -> None:
    assert pod_group_name(member("a", "train")) == "train"
    assert pod_group_name(member("a", None)) is None
    assert pod_group_name({"spec": {"schedulingGroup": {"podGroupName": ""}}}) is None
    assert coscheduling_group({"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "g"}}}) == "g"
    assert coscheduling_group({"metadata": {}}) is None


def test_min_count_of_a_gang_policy_only() -> None:
    assert gang_min_count({"spec": {"schedulingPolicy": {"gang": {"minCount": 8}}}}) == 8
    assert gang_min_count({"spec": {"schedulingPolicy": {"basic": {}}}}) is None
    assert gang_min_count({"spec": {"schedulingPolicy": {"gang": {"minCount": True}}}}) is None
    assert gang_min_count({}) is None


def test_live_members_leave_out_ended_and_deleted_pods() -> None:
    pods = [
        member("a", "g"),
        member("b", "g", phase="Succeeded"),
        {**member("c", "g"), "metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
        member("d", "other"),
    ]
    assert [p["metadata"]["name"] for p in live_members(pods, "g")] == ["a"]


def test_one_failing_member_breaks_the_gang_only_when_the_rest_are_too_few() -> None:
    assert cannot_be_whole(8, 8)
    assert not cannot_be_whole(8, 7)
    assert cannot_be_whole(1, 1)


def test_several_failing_members_break_a_gang_whose_min_count_is_below_its_size() -> None:
    # 8 members, minCount 6: a pass survives two members that fit nowhere, not three
    assert not cannot_be_whole(8, 6, failing=1)
    assert not cannot_be_whole(8, 6, failing=2)
    assert cannot_be_whole(8, 6, failing=3)
    assert cannot_be_whole(8, 8, failing=0)  # the member just refused counts, even when not noted yet


def test_coscheduling_min_member() -> None:
    assert coscheduling_min_member({"spec": {"minMember": 3}}) == 3
    assert coscheduling_min_member({"spec": {"minMember": 0}}) is None
    assert coscheduling_min_member({"spec": {"minMember": "3"}}) is None
    assert coscheduling_min_member({}) is None


def test_live_members_by_the_coscheduling_label() -> None:
    labelled = {"metadata": {"name": "a", "labels": {"scheduling.x-k8s.io/pod-group": "g"}}, "status": {}}
    native = {"metadata": {"name": "b"}, "spec": {"schedulingGroup": {"podGroupName": "g"}}, "status": {}}
    assert live_members([labelled, native], "g", label=True) == [labelled]
    assert live_members([labelled, native], "g") == [native]
