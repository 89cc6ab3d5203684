"""DLIO workload files and Hydra records as the checker's parameters.

A submitter has DLIO workload YAMLs as mlpstorage ships them (``resnet50_h100.yaml``: the
workload mapping itself, ``model.name`` naming it) and DLIO's Hydra records
(``dlio_config/`` with ``config.yaml``, whose ``workload`` is the config DLIO ran, and
``overrides.yaml``). Neither says how many accelerators ran or how much memory the hosts had;
:class:`Assumed` holds what the command line says instead, and each value taken from it, or
guessed from the file, is said (``CheckReport.assumed``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage_workloads.checker.report import flatten
from storage_workloads.checkpoint import CHECKPOINT_WORKLOADS, to_checkpoint_config
from storage_workloads.dlio import to_datagen_config
from storage_workloads.workloads import ACCELERATORS, MODELS, WORKLOADS

#: The files of DLIO's Hydra record folder (``hydra.output_subdir``).
HYDRA_FILES: Final = ("config.yaml", "overrides.yaml", "hydra.yaml")
#: Top-level keys of a DLIO workload mapping (one of them, with ``model``, marks a workload).
_WORKLOAD_KEYS: Final = frozenset(
    {"framework", "workflow", "dataset", "reader", "train", "checkpoint", "metric", "storage"}
)


@dataclass(frozen=True)
class Assumed:
    """What the command line says about a run whose file does not say it (``None``: not
    given): the accelerator, the accelerators (processes) of all hosts, the hosts and the
    memory of one host in GiB."""

    accelerator: str | None = None
    num_accelerators: int | None = None
    hosts: int | None = None
    host_memory_gb: float | None = None

    def fill(self, params: dict[str, Any], assumed: list[str], *, checkpointing: bool) -> None:
        """Set each value given here that ``params`` lacks, saying so in ``assumed``."""
        count_key = "num_processes" if checkpointing else "num_accelerators"
        pairs = [
            (count_key, self.num_accelerators, "--num-accelerators"),
            ("hosts", self.hosts, "--hosts"),
        ]
        if not checkpointing:
            pairs.append(("host_memory_gb", self.host_memory_gb, "--host-memory-gb"))
        for key, value, flag in pairs:
            if value is not None and params.get(key) is None:
                params[key] = value
                assumed.append(f"{key}: {value:g} ({flag})")


def is_hydra_record(folder: Path) -> bool:
    """Whether ``folder`` is DLIO's Hydra record (``config.yaml`` beside ``overrides.yaml`` or
    ``hydra.yaml``), as in a run folder's ``dlio_config/``."""
    return (folder / "config.yaml").is_file() and any(
        (folder / f).is_file() for f in HYDRA_FILES[1:]
    )


def is_workload(data: Mapping[str, Any]) -> bool:
    """Whether a mapping is a DLIO workload (``model`` beside ``framework``, ``dataset``, ...)
    rather than the checker's parameters (``model`` a name, ``config`` the workload)."""
    return isinstance(data.get("model"), Mapping) and bool(_WORKLOAD_KEYS & set(data))


def _config_name(source: Path) -> str:
    """The workload config's name: a file's stem (``resnet50_h100``), or for a Hydra record
    the ``workload=NAME`` its ``overrides.yaml`` lists (mlpstorage's command line), else the
    folder's name."""
    if source.is_dir():
        try:
            lines = (source / "overrides.yaml").read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        for line in lines:
            item = line.strip().removeprefix("- ").strip().strip("'\"")
            if item.startswith("workload="):
                return item.removeprefix("workload=")
        return source.name
    return source.stem


def checkpoint_name(name: object, stem: str) -> str | None:
    """The checkpointing workload a file is of: its ``model.name`` as DLIO spells it
    (``llama_8b``) or as this package does (``llama3_8b``), else the file's name."""
    stem = stem.replace("-", "_")
    for w in CHECKPOINT_WORKLOADS.values():
        if name in (w.dlio_model_name, w.name) or stem == w.name:
            return w.name
    return None


def _accelerator(model: str, stem: str, config: Mapping[str, Any]) -> tuple[str | None, str]:
    """A training workload file's accelerator, and how it was found: the file's name
    (``resnet50_h100``), else the workload whose computation time the file sets."""
    suffix = stem.rsplit("_", 1)[-1].lower() if "_" in stem else ""
    if suffix in ACCELERATORS and (model, suffix) in WORKLOADS:
        return suffix, f"from the file name {stem!r}"
    compute = flatten(config).get("train.computation_time")
    for (m, a), w in WORKLOADS.items():
        if m == model and compute == w.computation_time_s:
            return a, f"from train.computation_time {compute!r}"
    return None, ""


def workload_params(
    config: Mapping[str, Any], source: Path, given: Assumed, assumed: list[str]
) -> tuple[dict[str, Any], bool]:
    """The checker's parameters of a DLIO workload mapping (a shipped YAML, or the
    ``workload`` of a Hydra ``config.yaml``), and whether it is a datagen. The model is its
    ``model.name``; the accelerator ``--accelerator``, else the file's name, else its
    computation time; the counts and memory are ``given``. A checkpointing file run on fewer
    processes than the closed count gets the subset mode's keys where it lacks them, as
    mlpstorage adds them to the command line. Each such choice goes to ``assumed``."""
    stem = _config_name(source)
    model_map = config.get("model")
    name = model_map.get("name") if isinstance(model_map, Mapping) else model_map
    checkpoint = checkpoint_name(name, stem)
    if checkpoint is not None:
        params: dict[str, Any] = {"model": checkpoint, "config": copy.deepcopy(dict(config))}
        given.fill(params, assumed, checkpointing=True)
        w = CHECKPOINT_WORKLOADS[checkpoint]
        if params.get("num_processes") is None:
            params["num_processes"] = w.closed_processes
            assumed.append(
                f"num_processes: {w.closed_processes} (the closed count; --num-accelerators "
                "sets another)"
            )
        processes = params["num_processes"]
        if isinstance(processes, int) and 0 < processes < w.closed_processes:
            reference = flatten(
                to_checkpoint_config(w, checkpoint_folder="c", num_processes=processes)
            )
            ran = params["config"]
            for key in ("checkpoint.mode", "model.parallelism.data"):
                if key not in flatten(ran):
                    head, leaf = key.split(".", 1)
                    section = ran.setdefault(head, {})
                    *inner, last = leaf.split(".")
                    for part in inner:
                        section = section.setdefault(part, {})
                    section[last] = reference[key]
                    assumed.append(
                        f"{key}: {reference[key]!r} (mlpstorage adds it on {processes} processes)"
                    )
        return params, False
    model = str(name).strip().lower() if isinstance(name, str) else name
    params = {"model": model, "config": dict(config)}
    workflow = config.get("workflow") if isinstance(config.get("workflow"), Mapping) else {}
    datagen = bool(workflow.get("generate_data")) and not workflow.get("train", True)
    accelerator = given.accelerator
    if accelerator is not None:
        assumed.append(f"accelerator: {accelerator} (--accelerator)")
    elif model in MODELS and not datagen:
        accelerator, how = _accelerator(str(model), stem, config)
        if accelerator is not None:
            assumed.append(f"accelerator: {accelerator} ({how}; --accelerator sets another)")
        else:
            assumed.append(
                "the file names no accelerator (by its name or computation time): give "
                "--accelerator"
            )
    if accelerator is not None:
        params["accelerator"] = accelerator
    given.fill(params, assumed, checkpointing=False)
    missing = [
        flag
        for key, flag in (
            ("num_accelerators", "--num-accelerators"),
            ("host_memory_gb", "--host-memory-gb"),
        )
        if params.get(key) is None
    ]
    if missing and not datagen:
        names = {"--num-accelerators": "accelerator count", "--host-memory-gb": "host memory"}
        assumed.append(
            f"the file holds no {' or '.join(names[f] for f in missing)}: give "
            f"{' and '.join(missing)}"
        )
    return params, datagen


def datagen_accelerator(model: str, config: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """For a datagen of ``model``, which has no accelerator: the accelerator whose published
    datagen is nearest ``config`` (fewest differing dataset keys; the first on a tie), and the
    accelerators that share that datagen."""
    ran = {k: v for k, v in flatten(config).items() if k.startswith("dataset.")}
    scores: dict[str, int] = {}
    shapes: dict[str, dict[str, Any]] = {}
    for (m, a), w in WORKLOADS.items():
        if m != model:
            continue
        shape = {
            k: v
            for k, v in flatten(to_datagen_config(w, data_folder="data")).items()
            if k.startswith("dataset.") and k != "dataset.data_folder"
        }
        shapes[a] = shape
        scores[a] = sum(
            1 for k in set(shape) | set(ran) - {"dataset.data_folder"} if shape.get(k) != ran.get(k)
        )
    if not scores:
        return None
    best = min(scores, key=lambda a: scores[a])
    return best, [a for a in shapes if shapes[a] == shapes[best]]


def datagen_params(params: dict[str, Any], skipped: list[str]) -> None:
    """A datagen has no accelerator: its dataset is checked against the published datagen
    nearest it (:func:`datagen_accelerator`), and the skipped checks say so."""
    model, config = params.get("model"), params.get("config")
    nearest = (
        datagen_accelerator(model, config)
        if isinstance(model, str) and isinstance(config, Mapping)
        else None
    )
    if nearest is not None:
        params["accelerator"], same = nearest
        skipped.append(
            f"accelerator: a datagen has none; its dataset is checked against {model}'s "
            f"published datagen (that of {', '.join(same)})"
        )
    skipped.append("au: a datagen run has no accelerator utilisation")
