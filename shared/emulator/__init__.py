"""An in-process Kubernetes API emulator (a real aiohttp server) for integration tests and ``simulate``.

It speaks the core/v1 REST shapes kubernetes-asyncio uses; it imports neither kubernetes_asyncio nor redis.
"""

from vgpu_scheduler.shared.emulator.server import Emulator, RequestRecord, WriteRecord, WriteVerb

__all__ = ["Emulator", "RequestRecord", "WriteRecord", "WriteVerb"]
