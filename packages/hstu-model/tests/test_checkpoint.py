"""hstu_model.checkpoint: round trips, atomicity, pruning, cadence, data position."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from hstu_model import Trainer, seed_everything, shard_model
from hstu_model import checkpoint as ck
from hstu_model.checkpoint import files as ck_files
from hstu_model.checkpoint import format as ck_format
from hstu_model.config import TableOption

SHAPES = ([5, 3, 7], [4, 0, 6, 2], [1, 8])


class Killed(Exception):
    """Stands for the process dying at that point."""


def make_trainer(config, build, seed=0):
    return Trainer(build(config, seed), config)


def train(trainer, make_batch, steps, first_seed=0):
    return [
        trainer.train_step(make_batch(SHAPES[s % 3], seed=first_seed + s)) for s in range(steps)
    ]


def draws():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def optimizer_tensors(trainer):
    out = {}
    for name, opt in [("dense", trainer.dense_optimizer), ("sparse", trainer.sparse_optimizer)]:
        for index, state in opt.state_dict()["state"].items():
            for key, value in state.items():
                out[f"{name}/{index}/{key}"] = value.clone()
    return out


def assert_same_tensors(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


def test_round_trip_restores_tensors_step_and_rng(tiny_config, build, make_batch, tmp_path):
    trainer = make_trainer(tiny_config, build)
    train(trainer, make_batch, 3)
    extra = {"data": {"epoch": 0, "source": 4, "consumed": 512}, "metric": [0.5, None]}
    path = ck.save_checkpoint(tmp_path, trainer, extra=extra)
    assert path == tmp_path / "step-3"
    assert (path / "tensors" / ".metadata").is_file()  # torch.distributed.checkpoint format
    model_state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    optim_state = optimizer_tensors(trainer)
    expected_draws = draws()
    expected_losses = train(trainer, make_batch, 2, first_seed=10)
    expected_digest = ck.state_digest(trainer)

    other = make_trainer(tiny_config, build, seed=7)  # other weights, no optimizer state yet
    seed_everything(123)
    info = ck.load_checkpoint(ck.latest(tmp_path), other)
    assert info.step == 3 and other.step == 3 and info.extra == extra
    assert info.config["model"]["embedding_dim"] == 16  # the trainer's config, as JSON
    assert_same_tensors(model_state, other.model.state_dict())
    assert_same_tensors(optim_state, optimizer_tensors(other))
    assert draws() == expected_draws
    assert train(other, make_batch, 2, first_seed=10) == expected_losses
    assert ck.state_digest(other) == expected_digest


def test_digest_sees_every_weight_and_the_step(tiny_config, build, make_batch):
    trainer = make_trainer(tiny_config, build)
    train(trainer, make_batch, 1)
    digest = ck.state_digest(trainer)
    assert digest == ck.state_digest(trainer) and len(digest) == 64
    with torch.no_grad():
        weight = next(iter(trainer.model.parameters()))
        weight.view(-1)[0] = torch.nextafter(weight.view(-1)[0], torch.tensor(1.0))
    assert ck.state_digest(trainer) != digest
    trainer.step += 1
    assert len({digest, ck.state_digest(trainer)}) == 2


def killed_while_writing_tensors(directory, trainer, monkeypatch):
    """A save of `trainer` into `directory` that dies while DCP writes its tensors."""

    def crash(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(ck_format.dcp, "save", crash)
    with pytest.raises(Killed):
        ck.save_checkpoint(directory, trainer)
    monkeypatch.undo()


def test_incomplete_checkpoints_are_ignored(tiny_config, build, make_batch, tmp_path, monkeypatch):
    trainer = make_trainer(tiny_config, build)
    train(trainer, make_batch, 1)
    ck.save_checkpoint(tmp_path, trainer)
    train(trainer, make_batch, 1)
    ck.save_checkpoint(tmp_path, trainer)

    # Killed after the rename, before COMPLETE: step-3 exists but does not count.
    write_json = ck_format._write_json

    def crash_before_complete(path, value):
        if path.name == ck.COMPLETE:
            raise Killed
        write_json(path, value)

    trainer.step = 3
    monkeypatch.setattr(ck_format, "_write_json", crash_before_complete)
    with pytest.raises(Killed):
        ck.save_checkpoint(tmp_path, trainer)
    monkeypatch.setattr(ck_format, "_write_json", write_json)
    assert (tmp_path / "step-3" / "meta.json").is_file()
    assert ck.latest(tmp_path).step == 2
    with pytest.raises(ck.CheckpointError, match="not a complete checkpoint"):
        ck.read_checkpoint(tmp_path / "step-3")

    # Killed while writing tensors: only a temporary directory.
    trainer.step = 4
    killed_while_writing_tensors(tmp_path, trainer, monkeypatch)
    assert (tmp_path / ".tmp-step-4").is_dir()
    assert [c.step for c in ck.list_checkpoints(tmp_path)] == [1, 2]
    assert ck.latest(tmp_path).step == 2

    # The next save (keep=2) finishes and clears the debris of both.
    trainer.step = 5
    ck.save_checkpoint(tmp_path, trainer, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2", "step-5"]
    assert ck.latest(tmp_path).step == 5
    # Without its marker, a checkpoint no longer counts.
    (tmp_path / "step-5" / ck.COMPLETE).unlink()
    assert ck.latest(tmp_path).step == 2
    assert ck.latest(tmp_path / "missing") is None


def test_keep_last_n(tiny_config, build, tmp_path):
    trainer = make_trainer(tiny_config, build)
    for step in range(1, 6):
        trainer.step = step
        ck.save_checkpoint(tmp_path, trainer, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-4", "step-5"]
    assert [c.step for c in ck.list_checkpoints(tmp_path)] == [4, 5]
    trainer.step = 5  # saving a step again replaces it
    ck.save_checkpoint(tmp_path, trainer, keep=2, extra={"again": True})
    assert ck.latest(tmp_path).extra == {"again": True}
    with pytest.raises(ValueError, match="keep"):
        ck.prune(tmp_path, 0)


def test_manifest_verifies_every_file_and_the_newest_good_one_is_found(
    tiny_config, build, tmp_path
):
    trainer = make_trainer(tiny_config, build)
    for step in (1, 2, 3):
        trainer.step = step
        ck.save_checkpoint(tmp_path, trainer)
    for step in (1, 2, 3):
        assert ck.verify_checkpoint(tmp_path / f"step-{step}") == []
    manifest = ck_files._read_json(tmp_path / "step-3" / ck.MANIFEST)
    assert {"meta.json", "config.json", "rng/rank-0.json"} <= set(manifest)
    assert any(name.startswith("tensors/") for name in manifest)
    # step-3: one byte of its tensors flipped (same size); step-2: its RNG file gone.
    tensors = next((tmp_path / "step-3" / "tensors").glob("*.distcp"))
    data = bytearray(tensors.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tensors.write_bytes(bytes(data))
    (tmp_path / "step-2" / "rng" / "rank-0.json").unlink()
    assert ck.verify_checkpoint(tmp_path / "step-3") == [
        f"{tensors}: sha256 differs from the manifest's"
    ]
    assert ck.verify_checkpoint(tmp_path / "step-2") == [
        f"{tmp_path / 'step-2' / 'rng' / 'rank-0.json'}: missing"
    ]
    found, skipped = ck.latest_verified(tmp_path)
    assert found.step == 1
    assert [path.name for path, _ in skipped] == ["step-3", "step-2"]
    (tmp_path / "step-1" / ck.MANIFEST).write_text("{}\n")  # a manifest that lists nothing
    assert "does not match the sha256" in ck.verify_checkpoint(tmp_path / "step-1")[0]
    assert ck.latest_verified(tmp_path)[0] is None
    (tmp_path / "step-1" / "meta.json").write_text("{")
    with pytest.raises(ck.CheckpointError, match=r"meta\.json: unreadable"):
        ck.read_checkpoint(tmp_path / "step-1")


def test_another_config_is_refused(tiny_config, build, make_batch, tmp_path):
    trainer = make_trainer(tiny_config, build)
    train(trainer, make_batch, 1)
    ck.save_checkpoint(tmp_path, trainer)
    other_config = tiny_config.replace(optimizer={"dense_lr": 0.5})
    other = Trainer(build(other_config), other_config)
    with pytest.raises(ck.CheckpointError, match=r"optimizer\.dense_lr: 0\.002 then, 0\.5 now"):
        ck.load_checkpoint(tmp_path / "step-1", other)


def test_schedule_every_steps_and_seconds():
    now = [0.0]
    schedule = ck.CheckpointSchedule(every_steps=5, every_seconds=10.0, clock=lambda: now[0])
    assert [s for s in range(1, 16) if schedule.due(s)] == [5, 10, 15]
    now[0] = 10.0
    assert schedule.due(7)
    schedule.saved()
    now[0] = 19.9
    assert not schedule.due(8)
    only_time = ck.CheckpointSchedule(every_seconds=1.0, clock=lambda: now[0])
    assert not only_time.due(1)
    now[0] += 1.0
    assert only_time.due(2)
    assert not ck.CheckpointSchedule().enabled
    with pytest.raises(ValueError):
        ck.CheckpointSchedule(every_steps=-1)


def test_stream_position_walks_sources_and_passes():
    position = ck.StreamPosition([0, 512, 0, 256])
    assert (position.epoch, position.source, position.consumed) == (0, 1, 0)  # empty skipped
    walk = []
    for _ in range(4):
        position.advance(256)
        walk.append((position.epoch, position.source, position.consumed))
    assert walk == [(0, 1, 256), (0, 3, 0), (1, 1, 0), (1, 1, 256)]
    state = position.state_dict()
    again = ck.StreamPosition([0, 512, 0, 256])
    again.load_state_dict(state)
    assert (again.epoch, again.source, again.consumed) == (1, 1, 256)
    with pytest.raises(ValueError, match="data differs"):
        ck.StreamPosition([0, 512, 0, 512]).load_state_dict(state)
    with pytest.raises(ValueError, match="spans two sources"):
        again.advance(512)
    with pytest.raises(ValueError):
        ck.StreamPosition([0, 0])


def test_rewind_file_keeps_the_tail(tmp_path):
    path = tmp_path / "run.log"
    path.write_bytes(b"kept\nafter the checkpoint\n")
    assert ck.rewind_file(path, 5) == 21
    assert path.read_bytes() == b"kept\n"
    assert (tmp_path / "run.log.discarded").read_bytes() == b"after the checkpoint\n"
    assert ck.rewind_file(path, 5) == 0
    with pytest.raises(ck.CheckpointError, match="has 5 bytes but had 9"):
        ck.rewind_file(path, 9)


def test_the_package_exports_its_public_names():
    """What callers use of hstu_model.checkpoint stays importable from it, whichever module
    holds it."""
    assert set(ck.__all__) <= set(dir(ck))
    used = {"Checkpointer", "CheckpointError", "CheckpointInfo", "CheckpointSchedule"}
    used |= {"CheckpointableTrainer", "StreamPosition", "COMPLETE", "MANIFEST"}
    used |= {"config_differences", "latest", "latest_verified", "list_checkpoint_dirs"}
    used |= {"list_checkpoints", "load_checkpoint", "prune", "read_checkpoint", "rewind_file"}
    used |= {"rng_state", "save_checkpoint", "set_rng_state", "state_digest", "verify_checkpoint"}
    assert used <= set(ck.__all__)


def test_checkpointer_saves_on_schedule(tiny_config, build, make_batch, tmp_path):
    trainer = make_trainer(tiny_config, build)
    saver = ck.Checkpointer(tmp_path, every_steps=2, keep=1, config={"run": {"x": 1}})
    saved = []
    for _ in range(5):
        train(trainer, make_batch, 1)
        if saver.maybe_save(trainer, lambda: {"step": trainer.step}) is not None:
            saved.append(trainer.step)
    assert saved == [2, 4]
    info = saver.latest()
    assert (info.step, info.extra, info.config) == (4, {"step": 4}, {"run": {"x": 1}})
    assert [p.name for p in tmp_path.iterdir()] == ["step-4"]


def test_sharded_model_round_trip(gloo_world_1, tiny_config, vocab, make_batch, tmp_path):
    """With a process group, DCP saves the ShardedTensors of the sharded tables and the
    keyed fused optimizer; the time cadence is broadcast."""
    cfg = tiny_config.replace(
        optimizer={"warmup_steps": 2},
        sharding={"sharding_types": (TableOption("item_id", "row_wise"),)},
    )

    def sharded(seed):
        from hstu_model import HSTURanker

        seed_everything(seed)
        dmp, _ = shard_model(HSTURanker(cfg.model, vocab), cfg, gloo_world_1)
        return Trainer(dmp, cfg)

    trainer = sharded(0)
    train(trainer, make_batch, 2)
    saver = ck.Checkpointer(tmp_path, every_seconds=3600.0)
    assert not saver.maybe_save(trainer)  # broadcast from rank 0: not yet
    saver.save(trainer)
    expected = train(trainer, make_batch, 2, first_seed=10)
    other = sharded(5)
    ck.load_checkpoint(saver.latest(), other)
    assert train(other, make_batch, 2, first_seed=10) == expected
    assert ck.state_digest(other) == ck.state_digest(trainer)


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_prune_removes_only_what_a_save_wrote(
    tiny_config, build, make_batch, tmp_path, monkeypatch
):
    """A user's entries that look like a checkpoint's (step-100/notes.txt, .tmp-mywork/, a file
    .trash-can.txt, an empty step-7/) are kept; a save's own debris and old steps go."""
    (tmp_path / "step-100").mkdir()
    (tmp_path / "step-100" / "notes.txt").write_text("mine")
    (tmp_path / ".tmp-mywork").mkdir()
    (tmp_path / ".tmp-mywork" / "draft.txt").write_text("mine")
    (tmp_path / ".trash-can.txt").write_text("mine")
    (tmp_path / ".trash-step-9").mkdir()
    (tmp_path / ".trash-step-9" / "keep.txt").write_text("mine")
    (tmp_path / "step-7").mkdir()
    users = {p for p in _tree(tmp_path)}
    trainer = make_trainer(tiny_config, build)
    for step in (1, 2, 3):
        trainer.step = step
        ck.save_checkpoint(tmp_path, trainer, keep=5)
    trainer.step = 4
    killed_while_writing_tensors(tmp_path, trainer, monkeypatch)
    assert (tmp_path / ".tmp-step-4").is_dir()  # a killed save's debris
    trainer.step = 5
    ck.save_checkpoint(tmp_path, trainer, keep=2)
    left = set(_tree(tmp_path))
    assert users <= left
    ours = {p.split("/")[0] for p in left - users}
    assert ours == {"step-3", "step-5"}


def test_a_save_never_replaces_a_folder_it_did_not_write(tiny_config, build, tmp_path):
    (tmp_path / "step-6").mkdir()
    (tmp_path / "step-6" / "notes.txt").write_text("mine")
    (tmp_path / ".tmp-step-6").mkdir()
    (tmp_path / ".tmp-step-6" / "draft.txt").write_text("mine")
    before = _tree(tmp_path)
    trainer = make_trainer(tiny_config, build)
    trainer.step = 6
    with pytest.raises(ck.CheckpointError, match="not a checkpoint this package wrote"):
        ck.save_checkpoint(tmp_path, trainer, keep=1)
    assert _tree(tmp_path) == before


def _failing_dcp_save(error):
    def save(*args, **kwargs):
        wrapped = ck_format.dcp.api._wrap_exception(error)
        raise ck_format.dcp.api.CheckpointException("save failed", {0: wrapped})

    return save


def test_a_file_size_limit_during_a_save_is_one_line_and_leaves_no_temporary(
    tiny_config, build, tmp_path, monkeypatch
):
    import errno
    import os

    trainer = make_trainer(tiny_config, build)
    trainer.step = 2
    error = OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    monkeypatch.setattr(ck_format.dcp, "save", _failing_dcp_save(error))
    with pytest.raises(ck.CheckpointError) as info:
        ck.save_checkpoint(tmp_path, trainer)
    message = str(info.value)
    assert "\n" not in message and "file-size limit" in message and ".tmp-step-2" in message
    assert _tree(tmp_path) == []


def test_a_signal_during_a_save_is_raised_as_itself_and_leaves_no_temporary(
    tiny_config, build, tmp_path, monkeypatch
):
    class Interrupted(SystemExit):  # as a run's signal handler raises it
        pass

    trainer = make_trainer(tiny_config, build)
    trainer.step = 2
    monkeypatch.setattr(ck_format.dcp, "save", _failing_dcp_save(Interrupted(143)))
    with pytest.raises(Interrupted):
        ck.save_checkpoint(tmp_path, trainer)
    assert _tree(tmp_path) == []
