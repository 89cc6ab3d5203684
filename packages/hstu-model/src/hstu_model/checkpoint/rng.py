"""The states of Python's, NumPy's (global) and torch's CPU and CUDA generators as JSON data,
as a checkpoint's `rng/rank-<r>.json` holds them."""

from __future__ import annotations

import base64
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hstu_model.checkpoint.files import CheckpointError


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _unb64(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's (global) and torch's CPU (and CUDA) generators, as JSON
    data."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": np_state["state"]["key"].tolist(),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": _b64(torch.get_rng_state()),
        "cuda": None,
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned. CUDA states are restored when CUDA is available and
    has as many devices as were saved; otherwise `CheckpointError` (saved with CUDA) or nothing
    (saved without)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np.asarray(np_state["key"], dtype=np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    torch.set_rng_state(_unb64(state["torch"]))
    cuda = state.get("cuda")
    if cuda is not None:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(cuda):
            raise CheckpointError(
                f"the checkpoint holds the RNG states of {len(cuda)} CUDA device(s); this "
                f"process has {torch.cuda.device_count() if torch.cuda.is_available() else 0}"
            )
        torch.cuda.set_rng_state_all([_unb64(s) for s in cuda])
