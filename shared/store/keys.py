"""Every Redis key name, in one place, under a configurable prefix (default ``vgpu``).

Per-node keys share the hash tag ``{node:<name>}`` and per-namespace quota keys ``{ns:<name>}``, so every
per-node (per-namespace) piece of state lives in one Redis Cluster slot. Leases keep their token and epoch
under ``{lease:<name>}``. A few keys are global (the change stream, the node sets, the pod index, the store
meta); see ``docs/store.md`` for the full layout and who writes what.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.shared.errors import DecodeError

_FORBIDDEN = frozenset("{}\r\n\0 ")


def _check(what: str, name: str) -> str:
    if not name:
        raise DecodeError(what, "must not be empty")
    if not _FORBIDDEN.isdisjoint(name):  # a C loop over the name, no set built (every key of every call checks)
        bad = sorted(set(name) & _FORBIDDEN)
        raise DecodeError(what, f"contains forbidden characters {bad!r}", name)
    return name


@dataclass(frozen=True, slots=True)
class Keys:
    """Builds key names. ``prefix`` separates deployments sharing one Redis (default ``vgpu``)."""

    prefix: str = "vgpu"

    def __post_init__(self) -> None:
        _check("key prefix", self.prefix)

    # ---- per node: hash tag {node:<name>} ------------------------------------------------------

    def node_tag(self, node: str) -> str:
        return f"{self.prefix}:{{node:{_check('node name', node)}}}"

    def inventory(self, node: str) -> str:
        """STRING: the node's inventory envelope."""
        return f"{self.node_tag(node)}:inv"

    def capacity(self, node: str) -> str:
        """HASH uuid → ``count,devmem,devcore,mig,health,cordoned``: the plain numbers the scripts check."""
        return f"{self.node_tag(node)}:cap"

    def generation(self, node: str) -> str:
        """STRING int: bumped on every inventory or usage change of the node; survives node deletion."""
        return f"{self.node_tag(node)}:gen"

    def usage(self, node: str) -> str:
        """HASH: maintained per-device usage counters (``u|<uuid>``, ``p|<uuid>|<start>|<size>``, ``l|…``)."""
        return f"{self.node_tag(node)}:usage"

    def pod_charges(self, node: str) -> str:
        """HASH pod uid → ``<state>|<reserved_at_ms>|<charges JSON>``."""
        return f"{self.node_tag(node)}:pods"

    def allocations(self, node: str) -> str:
        """HASH pod uid → allocation envelope."""
        return f"{self.node_tag(node)}:allocs"

    def claims(self, node: str) -> str:
        """HASH pod uid → ``<token>|<expires_ms>``: the bind that owns the pod's record on this node."""
        return f"{self.node_tag(node)}:claims"

    def bind_hints(self, node: str) -> str:
        """HASH pod uid → what ``/filter`` saw of the pod that ``/bind`` needs (opaque to the store): written with a
        reservation, removed with the record or when its bind finishes."""
        return f"{self.node_tag(node)}:hints"

    def node_lock(self, node: str) -> str:
        """STRING ``<token>|<expires_ms>|<acquired_ms>|<owner>``: the bind arbiter of the node."""
        return f"{self.node_tag(node)}:lock"

    def node_lock_epoch(self, node: str) -> str:
        """STRING int: fencing-token counter of the node lock."""
        return f"{self.node_tag(node)}:lock:epoch"

    # ---- per namespace: hash tag {ns:<name>} -----------------------------------------------------

    def quota(self, namespace: str) -> str:
        """HASH: ``env`` (limits envelope), ``lm``/``lc`` (limits), ``um``/``uc`` (usage sums)."""
        return f"{self.prefix}:{{ns:{_check('namespace', namespace)}}}:quota"

    def quota_pods(self, namespace: str) -> str:
        """HASH pod uid → ``<mem_mib>,<cores_pct>``: what each pod is charged against the namespace quota."""
        return f"{self.prefix}:{{ns:{_check('namespace', namespace)}}}:quota:pods"

    # ---- per lease: hash tag {lease:<name>} --------------------------------------------------

    def lease(self, name: str) -> str:
        """STRING ``<token>|<holder>`` with a PX expiry: the lease itself."""
        return f"{self.prefix}:{{lease:{_check('lease name', name)}}}"

    def lease_epoch(self, name: str) -> str:
        """STRING int: the lease's fencing-token counter (INCR on each acquisition)."""
        return f"{self.prefix}:{{lease:{_check('lease name', name)}}}:epoch"

    # ---- global ------------------------------------------------------------------------------

    def inventory_nodes(self) -> str:
        """SET: nodes that have an inventory."""
        return f"{self.prefix}:nodes:inv"

    def allocation_nodes(self) -> str:
        """SET: nodes that hold at least one reservation or allocation."""
        return f"{self.prefix}:nodes:alloc"

    def pod_index(self) -> str:
        """HASH pod uid → node: where each pod's reservation lives."""
        return f"{self.prefix}:pods"

    def quota_namespaces(self) -> str:
        """SET: namespaces with quota limits or usage."""
        return f"{self.prefix}:quota:namespaces"

    def changes(self) -> str:
        """STREAM of change events (node, generation, kind), capped with MAXLEN ~."""
        return f"{self.prefix}:changes"

    def meta(self) -> str:
        """HASH: store epoch and the "synced" markers."""
        return f"{self.prefix}:meta"

    def preempting(self, pod_uid: str) -> str:
        """STRING with a TTL: one extender replica is working out a preemption for this pod (docs/preemption.md)."""
        return f"{self.prefix}:preempting:{_check('pod uid', pod_uid)}"

    def gang_failed(self, namespace: str, group: str) -> str:
        """STRING with a TTL: a PodGroup member fitted nowhere and the group cannot be placed whole (docs/gangs.md)."""
        return f"{self.prefix}:gang:{_check('namespace', namespace)}/{_check('pod group', group)}"

    def gang_failing(self, namespace: str, group: str) -> str:
        """HASH member → server time (ms) it last fitted on no node, with a TTL: how many of a PodGroup's members
        fail in one pass (docs/gangs.md)."""
        return f"{self.prefix}:gang-failing:{_check('namespace', namespace)}/{_check('pod group', group)}"

    def everything(self) -> str:
        """A SCAN ``MATCH`` pattern for every key under this prefix (glob characters of the prefix escaped)."""
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return f"{escaped}:*"
