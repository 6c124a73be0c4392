"""vgpu-scheduler: a GPU-sharing scheduler extender for Kubernetes, wire-compatible with HAMi's device plugins.

The one top-level import package of the distribution. Its two subpackages live at the repository's root and are
linked in here by two relative symbolic links, which the wheel resolves into a real tree (docs/layout.md):
``vgpu_scheduler.shared`` (the shared library: the pure scheduling core, codecs, Redis and Kubernetes adapters)
and ``vgpu_scheduler.services`` (the registrar, informer, extender, simulator and the operator commands).
"""
