"""Crash-exact checkpoints of a `Trainer`: weights, optimizer states, step, RNG and run state.

A checkpoint is the directory `<dir>/step-<N>`, `N` the trainer's step:

    step-<N>/
      tensors/           model and optimizer tensors, torch.distributed.checkpoint (DCP) format
      rng/rank-<r>.json  Python, NumPy, torch CPU (and CUDA) generator states of rank r
      meta.json          step, world size, optimizer param_groups, the caller's `extra` dict
      config.json        the effective config (JSON)
      manifest.json      size and sha256 of every file above (written after them)
      COMPLETE           written last, holding the manifest's own sha256

A save is atomic (a process killed during one leaves the previous checkpoint as the newest),
and a checkpoint verifies against its manifest. The modules: `format` saves and loads a trainer
(any `CheckpointableTrainer`, from `state`, which maps its model and optimizers to named
tensors), `directory` lists, finds and prunes the checkpoints of a directory, `files` names
their files and verifies them, `rng` holds the generator states, `position` the data position,
and `schedule` says when to save (`Checkpointer`).
"""

from hstu_model.checkpoint.directory import (
    CheckpointInfo,
    in_the_way,
    latest,
    latest_verified,
    list_checkpoint_dirs,
    list_checkpoints,
    prune,
    read_checkpoint,
)
from hstu_model.checkpoint.files import (
    COMPLETE,
    CONFIG,
    FORMAT_VERSION,
    MANIFEST,
    META,
    RNG,
    TENSORS,
    CheckpointError,
    rewind_file,
    verify_checkpoint,
)
from hstu_model.checkpoint.format import config_differences, load_checkpoint, save_checkpoint
from hstu_model.checkpoint.position import StreamPosition
from hstu_model.checkpoint.rng import rng_state, set_rng_state
from hstu_model.checkpoint.schedule import Checkpointer, CheckpointSchedule
from hstu_model.checkpoint.state import CheckpointableTrainer, state_digest

__all__ = [
    "COMPLETE",
    "CONFIG",
    "FORMAT_VERSION",
    "MANIFEST",
    "META",
    "RNG",
    "TENSORS",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointSchedule",
    "CheckpointableTrainer",
    "Checkpointer",
    "StreamPosition",
    "config_differences",
    "in_the_way",
    "latest",
    "latest_verified",
    "list_checkpoint_dirs",
    "list_checkpoints",
    "load_checkpoint",
    "prune",
    "read_checkpoint",
    "rewind_file",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "state_digest",
    "verify_checkpoint",
]
