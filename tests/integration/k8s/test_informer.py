"""The informer against the emulator: list then watch, resume, bookmarks, 410 re-list with a diff, selectors,
backoff, handler contract, cancellation."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.integration.k8s.conftest import FAST, Recorder, make_node, make_pod, running, summary
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.k8s import EventKind, Informer, KubeClient, KubeSettings, Resource, open_client


def watch_requests(em: Emulator, path: str) -> list[dict[str, str]]:
    return [r.query for r in em.requests if r.path == path and r.query.get("watch") in ("True", "true", "1")]


def list_requests(em: Emulator, path: str) -> list[dict[str, str]]:
    return [r.query for r in em.requests if r.path == path and "watch" not in r.query]


async def test_list_then_watch_sees_adds_modifies_deletes(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_pod("a"))
    emulator.put(make_pod("b", "other"))
    rec = Recorder()
    informer = Informer(kube, Resource.PODS, rec, settings=FAST)
    async with running(informer):
        first = await rec.until_relisted()
        assert summary(first) == [("ADDED", "a"), ("ADDED", "b"), ("RELISTED", "")]
        assert informer.ready.is_set()
        assert first[0].obj["kind"] == "Pod" and first[0].obj["apiVersion"] == "v1"  # filled in on list items
        assert first[-1].resource_version == str(emulator.resource_version)
        await emulator.wait_for(lambda: emulator.open_watches("pods") == 1)

        emulator.put(make_pod("c"))
        ev = await rec.next()
        assert (ev.kind, ev.obj["metadata"]["name"]) == (EventKind.ADDED, "c")
        assert ev.resource_version == ev.obj["metadata"]["resourceVersion"]

        emulator.patch("pods", "default", "a", {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}})
        ev = await rec.next()
        assert ev.kind is EventKind.MODIFIED
        assert ev.obj["metadata"]["annotations"]["hami.io/bind-phase"] == "success"

        emulator.delete("pods", "other", "b")
        ev = await rec.next()
        assert (ev.kind, ev.obj["metadata"]["name"]) == (EventKind.DELETED, "b")

        assert informer.get("a", "default") is not None
        assert informer.get("b", "other") is None
        assert sorted(o["metadata"]["name"] for o in informer.objects()) == ["a", "c"]
        assert informer.resource_version == str(emulator.resource_version)


async def test_resumes_from_its_resource_version_without_relisting(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_node("n1"))
    rec = Recorder()
    informer = Informer(kube, Resource.NODES, rec, settings=FAST)
    async with running(informer):
        await rec.until_relisted()
        await emulator.wait_for(lambda: emulator.open_watches("nodes") == 1)
        seen_rv = informer.resource_version
        # the stream ends; these writes happen before the informer can reconnect
        emulator.close_watches()
        emulator.put(make_node("n2"))
        emulator.delete("nodes", None, "n1")
        got = [await rec.next(), await rec.next()]
        assert summary(got) == [("ADDED", "n2"), ("DELETED", "n1")]
        assert informer.stats.lists == 1
        assert [q.get("resourceVersion") for q in watch_requests(emulator, "/api/v1/nodes")][-1] == seen_rv
        assert rec.drained() == []


async def test_bookmarks_advance_the_resume_version(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_pod("a", labels={"gpu": "yes"}))
    rec = Recorder()
    informer = Informer(kube, Resource.PODS, rec, label_selector="gpu=yes", settings=FAST)
    async with running(informer):
        await rec.until_relisted()
        await emulator.wait_for(lambda: emulator.open_watches("pods") == 1)
        listed_rv = informer.resource_version
        emulator.put(make_pod("quiet", labels={"gpu": "no"}))  # not selected: no event, but the version moves on
        assert emulator.send_bookmarks() == 1
        emulator.close_watches()
        await emulator.wait_for(lambda: len(watch_requests(emulator, "/api/v1/pods")) == 2)
        resumed = watch_requests(emulator, "/api/v1/pods")[-1]
        assert resumed["resourceVersion"] == str(emulator.resource_version) != listed_rv
        assert resumed["allowWatchBookmarks"] in ("True", "true")
        assert resumed["labelSelector"] == "gpu=yes"
        assert informer.stats.bookmarks == 1
        assert rec.drained() == []  # bookmarks never reach the handler


@pytest.mark.parametrize(
    ("how", "http_status"),
    [("error-event-mid-watch", False), ("compacted-history-on-resume", False), ("http-410-on-resume", True)],
    ids=str,
)
async def test_410_relists_and_reports_the_difference(how: str, http_status: bool) -> None:
    em = Emulator(bookmark_interval_s=None, expired_as_http_status=http_status)
    await em.start()
    try:
        async with open_client(KubeSettings(server=em.url, qps=0)) as client:
            for name in ("a", "b", "c"):
                em.put(make_pod(name))
            rec = Recorder()
            informer = Informer(client, Resource.PODS, rec, settings=FAST)
            async with running(informer):
                await rec.until_relisted()
                await em.wait_for(lambda: em.open_watches("pods") == 1)
                stale_rv = informer.resource_version
                watches_before = len(watch_requests(em, "/api/v1/pods"))
                # all in one step, so the informer cannot watch any of it: it must find out by re-listing
                if how == "error-event-mid-watch":
                    em.expire_watches()
                else:
                    em.close_watches()
                em.delete("pods", "default", "b")
                em.patch("pods", "default", "c", {"metadata": {"labels": {"changed": "yes"}}})
                em.put(make_pod("d"))
                if how != "error-event-mid-watch":
                    em.compact()
                diff = await rec.until_relisted()
                assert summary(diff) == [("DELETED", "b"), ("MODIFIED", "c"), ("ADDED", "d"), ("RELISTED", "")]
                assert diff[0].obj["metadata"]["name"] == "b"  # the last known state of what is gone
                assert diff[1].obj["metadata"]["labels"] == {"changed": "yes"}
                assert informer.stats.expired == 1
                assert informer.stats.lists == 2
                # the stale version is never retried: the next watch starts from the new list's version
                await em.wait_for(lambda: em.open_watches("pods") == 1)
                versions = [q.get("resourceVersion") for q in watch_requests(em, "/api/v1/pods")[watches_before:]]
                resumed = [] if how == "error-event-mid-watch" else [stale_rv]  # the resume that met the 410
                assert versions == [*resumed, str(em.resource_version)]
                assert sorted(o["metadata"]["name"] for o in informer.objects()) == ["a", "c", "d"]
    finally:
        await em.stop()


async def test_relist_reports_a_recreated_object_as_delete_then_add(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_pod("a"))
    rec = Recorder()
    informer = Informer(kube, Resource.PODS, rec, settings=FAST)
    async with running(informer):
        await rec.until_relisted()
        await emulator.wait_for(lambda: emulator.open_watches("pods") == 1)
        old_uid = informer.get("a", "default")["metadata"]["uid"]  # type: ignore[index]
        emulator.expire_watches()
        emulator.delete("pods", "default", "a")
        emulator.put(make_pod("a"))
        diff = await rec.until_relisted()
        assert summary(diff) == [("DELETED", "a"), ("ADDED", "a"), ("RELISTED", "")]
        assert diff[0].obj["metadata"]["uid"] == old_uid != diff[1].obj["metadata"]["uid"]


async def test_label_selector_moves_objects_in_and_out(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_node("gpu-1", labels={"gpu": "on"}))
    emulator.put(make_node("cpu-1"))
    rec = Recorder()
    informer = Informer(kube, Resource.NODES, rec, label_selector="gpu=on", settings=FAST)
    async with running(informer):
        assert summary(await rec.until_relisted()) == [("ADDED", "gpu-1"), ("RELISTED", "")]
        await emulator.wait_for(lambda: emulator.open_watches("nodes") == 1)
        emulator.patch("nodes", None, "cpu-1", {"metadata": {"labels": {"gpu": "on"}}})
        emulator.patch("nodes", None, "gpu-1", {"metadata": {"labels": {"gpu": None}}})
        got = [await rec.next(), await rec.next()]
        assert summary(got) == [("ADDED", "cpu-1"), ("DELETED", "gpu-1")]
        assert [o["metadata"]["name"] for o in informer.objects()] == ["cpu-1"]


async def test_field_selector_and_namespace(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_pod("on-n1", "team-a", node="n1"))
    emulator.put(make_pod("on-n2", "team-a", node="n2"))
    emulator.put(make_pod("other-ns", "team-b", node="n1"))
    rec = Recorder()
    informer = Informer(kube, Resource.PODS, rec, namespace="team-a", field_selector="spec.nodeName=n1", settings=FAST)
    async with running(informer):
        assert summary(await rec.until_relisted()) == [("ADDED", "on-n1"), ("RELISTED", "")]


async def test_quotas_are_informed(emulator: Emulator, kube: KubeClient) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu", "namespace": "team-a"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}},
    }
    emulator.put(quota)
    rec = Recorder()
    async with running(Informer(kube, Resource.RESOURCEQUOTAS, rec, settings=FAST)):
        first = await rec.until_relisted()
        assert first[0].obj["spec"]["hard"] == {"limits.nvidia.com/gpumem": "8000"}
        assert first[0].obj["kind"] == "ResourceQuota"


async def test_api_errors_back_off_and_recover(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_node("n1"))
    emulator.inject_error(503, method="GET", path="^/api/v1/nodes$", times=2, message="etcd is sad")
    rec = Recorder()
    informer = Informer(kube, Resource.NODES, rec, settings=FAST, rng=random.Random(7))
    async with running(informer):
        assert summary(await rec.until_relisted()) == [("ADDED", "n1"), ("RELISTED", "")]
        assert informer.stats.errors == 2
        assert informer.stats.lists == 1


async def test_handler_transient_error_redelivers_the_event(emulator: Emulator, kube: KubeClient) -> None:
    rec = Recorder()
    informer = Informer(kube, Resource.PODS, rec, settings=FAST)
    async with running(informer):
        await rec.until_relisted()
        await emulator.wait_for(lambda: emulator.open_watches("pods") == 1)
        rec.fail_with.append(TransientError("redis is restarting", delay=0.0))
        emulator.put(make_pod("x"))
        ev = await rec.next()
        assert (ev.kind, ev.obj["metadata"]["name"]) == (EventKind.ADDED, "x")
        assert informer.stats.errors == 1
        assert informer.stats.lists == 1  # resumed from the last delivered version, no re-list


async def test_handler_bug_ends_run(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_pod("x"))
    rec = Recorder()
    rec.fail_with.append(RuntimeError("a bug"))
    informer = Informer(kube, Resource.PODS, rec, settings=FAST)
    with pytest.raises(RuntimeError, match="a bug"):
        await asyncio.wait_for(informer.run(), 5)
    assert not informer.ready.is_set()


async def test_cancellation_closes_the_watch(emulator: Emulator, kube: KubeClient) -> None:
    rec = Recorder()
    informer = Informer(kube, Resource.NODES, rec, settings=FAST)
    task = asyncio.create_task(informer.run(), name="informer-under-test")
    await rec.until_relisted()
    await emulator.wait_for(lambda: emulator.open_watches("nodes") == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await emulator.wait_for(lambda: emulator.open_watches("nodes") == 0)


def test_cluster_scoped_resource_takes_no_namespace(kube: KubeClient) -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        Informer(kube, Resource.NODES, Recorder(), namespace="x")


async def test_objects_are_kept_and_delivered_without_managed_fields(emulator: Emulator, kube: KubeClient) -> None:
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
    listed = make_pod("listed")
    listed["metadata"]["managedFields"] = managed
    emulator.put(listed)
    rec = Recorder()
    informer = Informer(kube, Resource.PODS, rec, settings=FAST)
    async with running(informer):
        first = await rec.until_relisted()
        assert "managedFields" not in first[0].obj["metadata"]
        await emulator.wait_for(lambda: emulator.open_watches("pods") == 1)
        watched = make_pod("watched")
        watched["metadata"]["managedFields"] = managed
        emulator.put(watched)
        ev = await rec.next()
        assert (ev.kind, ev.obj["metadata"]["name"]) == (EventKind.ADDED, "watched")
        assert "managedFields" not in ev.obj["metadata"]
        assert all("managedFields" not in o["metadata"] for o in informer.objects())
        assert informer.get("watched", "default") is not None
