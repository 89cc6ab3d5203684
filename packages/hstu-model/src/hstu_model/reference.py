"""State dicts of the MLPerf DLRMv4 reference model (`DlrmHSTU`) and of `HSTURanker`, both ways.

The two models have the same parameters under other names (no layout differs: every tensor
keeps its shape and element order), so a reference checkpoint can be evaluated or trained on
here, and one of ours handed to the reference:

    model.load_state_dict(from_reference_state_dict(reference_sd))      # strict
    reference.load_state_dict(to_reference_state_dict(model.state_dict()))

`load_reference_state_dict(model, reference_sd)` does the first with every shape checked first,
naming both names of a tensor that does not fit.

The reference's persistent constant buffers (its action encoder's action bits, its
postprocessor's time periods) have no counterpart here: `HSTURanker` derives them from its
config. `from_reference_state_dict` checks them against the values this model computes with and
drops them; `to_reference_state_dict` writes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from hstu_model.model import TIME_PERIODS

_TRANSDUCER = "_hstu_transducer."
_PREPROCESSOR = _TRANSDUCER + "_input_preprocessor."

# (reference prefix, our prefix): a name maps by replacing the prefix; the rest of the name
# (a Sequential index and weight/bias) is the same on both sides.
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("_embedding_collection.embeddings.", "embedding_collection.embeddings."),
    (_PREPROCESSOR + "_content_embedding_mlp.", "content_mlp."),
    (_PREPROCESSOR + "_additional_embedding_mlp.", "additional_mlp."),
    (_PREPROCESSOR + "_action_embedding_mlp.", "action_mlp."),
    (_TRANSDUCER + "_output_postprocessor._time_feature_combiner.", "postprocessor.0."),
    (_TRANSDUCER + "_output_postprocessor._layer_norm.", "postprocessor.1."),
    ("_item_embedding_mlp.", "item_mlp."),
    ("_multitask_module._prediction_module.", "head."),
)

_NAMES: dict[str, str] = {
    _PREPROCESSOR + "_batched_contextual_linear_weights": "contextual_projection.weight",
    _PREPROCESSOR + "_batched_contextual_linear_bias": "contextual_projection.bias",
    _PREPROCESSOR + "_action_encoder._action_embedding_table": "action_table",
    _PREPROCESSOR + "_action_encoder._target_action_embedding_table": "candidate_action",
    _TRANSDUCER + "_positional_encoder._position_embeddings_weight": "position_embeddings.weight",
    _TRANSDUCER + "_positional_encoder._timestamp_embeddings_weight": "time_embeddings.weight",
}

_STU_LAYER = re.compile(r"^_hstu_transducer\._stu_module\._stu_layers\.(\d+)\.(_\w+)$")
_OUR_STU_LAYER = re.compile(r"^layers\.(\d+)\.(\w+)$")
_STU_NAMES: dict[str, str] = {
    "_uvqk_weight": "uvqk_weight",
    "_uvqk_beta": "uvqk_bias",
    "_input_norm_weight": "input_norm_weight",
    "_input_norm_bias": "input_norm_bias",
    "_output_weight": "output_weight",
    "_output_norm_weight": "output_norm_weight",
    "_output_norm_bias": "output_norm_bias",
}

ACTION_BITS_BUFFER = _PREPROCESSOR + "_action_encoder._combined_action_weights"
PERIOD_UNITS_BUFFER = _TRANSDUCER + "_output_postprocessor._period_units"
UNITS_PER_PERIOD_BUFFER = _TRANSDUCER + "_output_postprocessor._units_per_period"
DEFAULT_ACTION_WEIGHTS: tuple[int, ...] = (1, 2, 4)
"""The yambda-5b action bits: listen_plus, like, skip."""

_WRAPPER_PREFIXES = ("module.", "_dmp_wrapped_module.")
"""Prefixes that DistributedDataParallel / DistributedModelParallel put before every name."""


class ReferenceStateDictError(ValueError):
    """A state dict does not fit the other model; the message names every tensor at fault."""


def reference_to_ours(name: str) -> str | None:
    """Our name of the reference's parameter `name`, or None when it has none."""
    if name in _NAMES:
        return _NAMES[name]
    layer = _STU_LAYER.match(name)
    if layer and layer.group(2) in _STU_NAMES:
        return f"layers.{layer.group(1)}.{_STU_NAMES[layer.group(2)]}"
    for theirs, ours in _PREFIXES:
        if name.startswith(theirs):
            return ours + name.removeprefix(theirs)
    return None


def ours_to_reference(name: str) -> str | None:
    """The reference's name of our parameter `name`, or None when it has none."""
    for theirs, ours in _NAMES.items():
        if ours == name:
            return theirs
    layer = _OUR_STU_LAYER.match(name)
    if layer:
        for theirs, ours in _STU_NAMES.items():
            if ours == layer.group(2):
                return f"_hstu_transducer._stu_module._stu_layers.{layer.group(1)}.{theirs}"
        return None
    for theirs, ours in _PREFIXES:
        if name.startswith(ours):
            return theirs + name.removeprefix(ours)
    return None


def _strip_wrappers(name: str) -> str:
    stripped = None
    while stripped != name:
        stripped = name
        for prefix in _WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
    return name


def _listed(problems: list[str], limit: int = 12) -> str:
    """`problems` joined, the first `limit` of them and a count of the rest."""
    shown = "; ".join(problems[:limit])
    rest = len(problems) - limit
    return shown + (f"; and {rest} more" if rest > 0 else "")


def _as_list(value: torch.Tensor) -> list[float]:
    return [float(v) for v in value.detach().reshape(-1).tolist()]


def _check_constant(name: str, value: torch.Tensor, expected: Sequence[float]) -> str | None:
    if _as_list(value) != [float(v) for v in expected]:
        return f"{name} = {_as_list(value)}, this model computes with {list(expected)}"
    return None


def from_reference_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    action_weights: Sequence[int] = DEFAULT_ACTION_WEIGHTS,
) -> dict[str, torch.Tensor]:
    """The reference `DlrmHSTU` state dict `state_dict` under `HSTURanker`'s names.

    Names may carry DistributedDataParallel/DistributedModelParallel prefixes (`module.`,
    `_dmp_wrapped_module.`). The tensors are the same objects (no copy). Raises
    ReferenceStateDictError naming every tensor it cannot map, and every constant buffer whose
    value differs from what `HSTURanker` computes with (`action_weights`: the model's config).
    """
    out: dict[str, torch.Tensor] = {}
    unknown, wrong = [], []
    constants = {
        ACTION_BITS_BUFFER: [float(w) for w in action_weights],
        PERIOD_UNITS_BUFFER: [float(unit) for unit, _ in TIME_PERIODS],
        UNITS_PER_PERIOD_BUFFER: [float(period) for _, period in TIME_PERIODS],
    }
    for raw_name, value in state_dict.items():
        name = _strip_wrappers(raw_name)
        if name in constants:
            problem = _check_constant(name, value, constants[name])
            if problem:
                wrong.append(problem)
            continue
        ours = reference_to_ours(name)
        if ours is None:
            unknown.append(raw_name)
        elif ours in out:
            wrong.append(f"{raw_name}: a second tensor for {ours}")
        else:
            out[ours] = value
    problems = [f"{n}: no counterpart in HSTURanker" for n in unknown] + wrong
    if problems:
        raise ReferenceStateDictError("reference state dict: " + _listed(problems))
    return out


def to_reference_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    action_weights: Sequence[int] = DEFAULT_ACTION_WEIGHTS,
) -> dict[str, torch.Tensor]:
    """`HSTURanker`'s state dict under the reference `DlrmHSTU`'s names, plus the reference's
    constant buffers (its action bits `action_weights`, its postprocessor's time periods).
    Raises ReferenceStateDictError naming every tensor that has no reference counterpart."""
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for raw_name, value in state_dict.items():
        name = _strip_wrappers(raw_name)
        theirs = ours_to_reference(name)
        if theirs is None:
            unknown.append(raw_name)
        else:
            out[theirs] = value
    if unknown:
        raise ReferenceStateDictError(
            "state dict: no counterpart in the reference DlrmHSTU for " + _listed(unknown)
        )
    device = next(iter(state_dict.values())).device if state_dict else None
    out[ACTION_BITS_BUFFER] = torch.tensor(list(action_weights), device=device)
    out[PERIOD_UNITS_BUFFER] = torch.tensor([[float(u) for u, _ in TIME_PERIODS]], device=device)
    out[UNITS_PER_PERIOD_BUFFER] = torch.tensor(
        [[float(p) for _, p in TIME_PERIODS]], device=device
    )
    return out


def load_reference_state_dict(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load a reference `DlrmHSTU` state dict into `model` (an `HSTURanker`), strictly.

    Every tensor is checked before anything is copied: a name without a counterpart, a missing
    parameter or a shape that differs raises ReferenceStateDictError naming the tensor on both
    sides (reference name -> our name: its shape against ours), and `model` is left unchanged.
    """
    action_weights = tuple(model.config.action_weights)
    converted = from_reference_state_dict(state_dict, action_weights)
    expected = model.state_dict()
    back = {ours: theirs for theirs, ours in _reference_names(state_dict).items()}
    problems = []
    for name, value in converted.items():
        if name not in expected:
            problems.append(f"{back.get(name, name)} -> {name}: this model has no such tensor")
        elif tuple(value.shape) != tuple(expected[name].shape):
            problems.append(
                f"{back.get(name, name)} -> {name}: shape {list(value.shape)}, this model's "
                f"{list(expected[name].shape)}"
            )
    missing = sorted(set(expected) - set(converted))
    problems += [f"{ours_to_reference(n) or n} -> {n}: missing" for n in missing]
    if problems:
        raise ReferenceStateDictError("reference state dict: " + _listed(problems))
    model.load_state_dict(converted, strict=True)


def _reference_names(state_dict: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Reference name (as given) -> our name, for the tensors that map."""
    names = {}
    for raw_name in state_dict:
        ours = reference_to_ours(_strip_wrappers(raw_name))
        if ours is not None:
            names[raw_name] = ours
    return names
