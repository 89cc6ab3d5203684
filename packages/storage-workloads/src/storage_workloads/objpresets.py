"""The 1-, 4- and 8-host forms of sai3-bench's ResNet50 and UNet3D object workloads, as named
presets (``resnet50_4hosts``, ``unet3d_8hosts_get``, ...).

sai3-bench's ``tests/configs/ai-ml/{resnet50,unet3d}_{1-host,4-hosts,8-hosts}.yaml`` keep the
per-host dataset of the 1-host form and multiply the objects per leaf directory by the host
count: ResNet50 150 objects per leaf directory per host (614,400 objects a host), UNet3D 64
(50,176 a host). Every host runs ``concurrency`` requests in flight for 300 s, and every host
reads from the whole dataset (random selection). A configuration runs prepare then get; the
``*_get`` form (as sai3-bench's ``unet3d_1-host-get``) skips the prepare stage and reads a
dataset prepared before.

A preset is an :class:`~storage_workloads.objects.ObjectWorkload` for the whole dataset plus the
host count it was written for and the phases ``object run`` runs; ``object list`` lists them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from storage_workloads.objects import OBJECT_WORKLOADS, ObjectWorkload

__all__ = ["OBJECT_PRESETS", "PRESET_HOSTS", "ObjectPreset", "object_preset"]

#: The host counts of sai3-bench's configurations.
PRESET_HOSTS: Final = (1, 4, 8)
_PHASES: Final = (("prepare", "get"), ("get",))


@dataclass(frozen=True)
class ObjectPreset:
    """One sai3-bench configuration: the workload over all its hosts, the host count, and the
    phases ``object run`` runs (``("prepare", "get")`` or ``("get",)``).

    Attributes:
        name: ``<model>_<n>host(s)``, with ``_get`` for the get-only form.
        workload: the whole dataset (``files_per_dir`` is per leaf directory over all hosts,
            as in sai3-bench's configs), ``concurrency`` per client and ``duration_s``.
        hosts: client hosts the configuration is written for.
        phases: what ``object run`` runs.
        source: the sai3-bench configuration it follows.
    """

    name: str
    workload: ObjectWorkload
    hosts: int
    phases: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1:
            raise ValueError(f"ObjectPreset.hosts must be an integer >= 1, got {self.hosts!r}")
        if self.phases not in _PHASES:
            raise ValueError(f"ObjectPreset.phases must be one of {_PHASES}, got {self.phases!r}")
        if self.workload.total_objects % self.hosts:
            raise ValueError(
                f"ObjectPreset {self.name}: {self.workload.total_objects} objects do not split "
                f"evenly over {self.hosts} hosts"
            )

    @property
    def objects_per_host(self) -> int:
        """Objects each host prepares (its share of the dataset)."""
        return self.workload.total_objects // self.hosts

    @property
    def files_per_dir_per_host(self) -> int:
        """Objects per leaf directory that each host adds (150 for ResNet50, 64 for UNet3D)."""
        return self.workload.files_per_dir // self.hosts

    def as_dict(self) -> dict[str, Any]:
        """What ``object list`` prints for the preset."""
        w = self.workload
        return {
            "preset": True,
            "hosts": self.hosts,
            "phases": list(self.phases),
            "objects_per_host": self.objects_per_host,
            "files_per_dir_per_host": self.files_per_dir_per_host,
            "bytes_per_host": self.objects_per_host * w.expected_object_bytes,
            "concurrency_per_host": w.concurrency,
            "duration_s": w.duration_s,
            "source": self.source,
            "workload": w.as_dict(),
        }


def _preset(model: str, hosts: int, phases: tuple[str, ...]) -> ObjectPreset:
    base = OBJECT_WORKLOADS[f"{model}_object"]
    form = "1-host" if hosts == 1 else f"{hosts}-hosts"
    name = f"{model}_{hosts}host{'s' if hosts > 1 else ''}" + (
        "" if "prepare" in phases else "_get"
    )
    return ObjectPreset(
        name=name,
        workload=dataclasses.replace(base, name=name, files_per_dir=base.files_per_dir * hosts),
        hosts=hosts,
        phases=phases,
        source=f"sai3-bench tests/configs/ai-ml/{model}_{form}.yaml"
        + ("" if "prepare" in phases else " without its prepare stage"),
    )


#: The presets by name, ResNet50 then UNet3D, by host count, prepare+get before get only.
OBJECT_PRESETS: Final[Mapping[str, ObjectPreset]] = MappingProxyType(
    {
        p.name: p
        for p in (
            _preset(model, hosts, phases)
            for model in ("resnet50", "unet3d")
            for hosts in PRESET_HOSTS
            for phases in _PHASES
        )
    }
)


def object_preset(name: str) -> ObjectPreset | None:
    """The preset called ``name`` (case-insensitive, ``-`` for ``_``), or ``None``."""
    return OBJECT_PRESETS.get(str(name).strip().lower().replace("-", "_"))
