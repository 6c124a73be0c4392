"""Cambricon's part of ``Fit`` (:class:`CambriconRules`): the model label as the type. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, PodConstraints
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules, selectors_uuid_ok
from vgpu_scheduler.shared.vendors.cambricon.keys import MLU

# ------------------------------------------------------------------------------------------------------------
# Fit rules
# ------------------------------------------------------------------------------------------------------------


def _generic_model(dev_type: str) -> bool:
    model = dev_type.strip()
    return model == "" or model.upper() == MLU


@dataclass(frozen=True, slots=True)
class CambriconRules(BasicRules):
    """Cambricon's ``Fit`` hooks: the common skeleton (memory in MiB, else a percentage of the card; cores as asked,
    above 100 capped at 100 as HAMi v2.10.0's ``Fit`` caps them) with HAMi's Cambricon type and UUID checks.

    * Type: with a ``use-mlutype`` / ``nouse-mlutype`` selector, a card whose model is unknown (type ``MLU``, no
      ``Model`` label) matches neither list and is refused; otherwise upper-cased substring matching.
    * UUID: a ``use-gpuuuid`` list must name the card *and* a ``nouse-gpuuuid`` list must not.
    """

    name: str = MLU

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        if req.type != self.name:
            return False
        sel = constraints.selectors(self.name)
        if not (sel.use_types or sel.nouse_types):
            return True
        if _generic_model(dev.type):
            return False
        kind = dev.type.upper()
        if sel.use_types and not any(t in kind for t in sel.use_types):
            return False
        return not any(t in kind for t in sel.nouse_types)

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.name))


RULES: DeviceRules = CambriconRules()
