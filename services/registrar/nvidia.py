"""NVIDIA as a registrar vendor: now :class:`shared.vendors.nvidia.NvidiaVendor` (kept for existing imports)."""

from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor

__all__ = ["NvidiaVendor"]
