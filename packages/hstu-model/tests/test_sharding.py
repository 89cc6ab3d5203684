"""shard_model on CPU with gloo: 2 ranks (sharding_worker.py under torch.distributed.run, one
launch for all scenarios) and 1 rank (in this process)."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import pytest
import torch

from hstu_model import HSTURanker, Trainer, seed_everything
from hstu_model.config import ConfigError, TableOption
from hstu_model.sharding import ShardingError, shard_model
from hstu_model.testing import slice_batch

WORKER = Path(__file__).with_name("sharding_worker.py")

pytestmark = [
    # TorchRec's own defaults (planner storage reservation, DDP arguments) warn about themselves.
    pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation:FutureWarning"),
    pytest.mark.filterwarnings("ignore:`broadcast_buffers` is deprecated:FutureWarning"),
]
TOLERANCE = 1e-5


@pytest.fixture(name="ranks", scope="module")
def ranks_fixture(run_distributed):
    """Each rank's results of every scenario of sharding_worker.py, 2 processes."""
    return run_distributed(WORKER, 2)


def scenario(ranks, name):
    results = []
    for rank, result in enumerate(ranks):
        assert name in result, f"rank {rank} did not reach {name}: {sorted(result)}"
        assert "exception" not in result[name], f"rank {rank}:\n{result[name]['exception']}"
        results.append(result[name])
    return results


@pytest.mark.slow
def test_plan_honours_overrides_and_is_logged(ranks):
    results = scenario(ranks, "equivalence")
    assert results[0]["summary"]["tables"] == results[1]["summary"]["tables"]
    for rank, result in enumerate(results):
        summary = result["summary"]
        assert summary["world_size"] == 2 and summary["compute_device"] == "cpu"
        tables = summary["tables"]
        assert len(tables) == 11
        item = tables["item_id"]
        assert (item["sharding_type"], item["compute_kernel"]) == ("row_wise", "fused")
        assert item["ranks"] == [0, 1]
        # The row-wise shards cover the 50 rows exactly, full width.
        rows = sorted((s["offsets"][0], s["sizes"][0]) for s in item["shards"])
        assert rows[0][0] == 0 and rows[0][0] + rows[0][1] == rows[1][0]
        assert rows[1][0] + rows[1][1] == 50
        assert all(s["sizes"][1] == 16 for s in item["shards"])
        assert tables["uid"]["sharding_type"] == "table_wise"
        assert len(tables["uid"]["ranks"]) == 1
        assert tables["artist_id"]["sharding_type"] == "column_wise"
        assert tables["user_x_artist"]["sharding_type"] == "row_wise"
        # Tables without an override are the planner's choice, but never data_parallel on CPU.
        assert all(t["sharding_type"] != "data_parallel" for t in tables.values())
        # One log line per table, with the plan actually chosen.
        log = result["log"]
        assert len(log) == 11
        for table, entry in tables.items():
            line = (
                f"sharding plan (rank {rank} of 2): table {table} -> {entry['sharding_type']}, "
                f"kernel {entry['compute_kernel']}, ranks {entry['ranks']}"
            )
            assert line in log


def test_two_ranks_train_like_one(ranks):
    """Same seed, same global batch: the 2-rank sharded model's loss (mean of the ranks'
    halves) equals the unsharded model's before and after each optimizer step (warmup
    factors 0, 0.5, 1), and on a held-out batch after the last step."""
    for result in scenario(ranks, "equivalence"):
        reference, sharded = result["reference"], result["sharded"]
        assert len(reference) == len(sharded) == 4
        assert sharded == pytest.approx(reference, abs=TOLERANCE, rel=0)
        assert reference[3] != reference[0]  # the steps did change the model
        assert result["dense_parameters"] == result["unsharded_dense_parameters"]
        assert result["sparse_optimizers"] == ["CombinedOptimizer"]
        # After the third step the warmup (2 steps) is over: the peak sparse lr.
        assert result["sparse_lr"] == pytest.approx([0.2] * len(result["sparse_lr"]))


def test_data_parallel_table_is_trained_after_backward(ranks):
    for result in scenario(ranks, "data_parallel_trainer"):
        assert result["summary"]["tables"]["uid"]["sharding_type"] == "data_parallel"
        assert result["sparse_optimizers"] == ["CombinedOptimizer", "RowWiseAdagrad"]
        assert result["replicas_equal"]
        assert result["sharded"] == pytest.approx(result["reference"], abs=TOLERANCE, rel=0)


def test_fp16_all_to_all_runs_on_gloo(ranks):
    for result in scenario(ranks, "fp16"):
        all_to_all = result["summary"]["all_to_all"]
        assert {a["sharding"] for a in all_to_all} == {"row_wise", "column_wise", "table_wise"}
        assert all((a["forward"], a["backward"]) == ("FP16", "FP16") for a in all_to_all)
        assert result["summary"]["fp16_all_to_all"] is True
        # fp16 rounding of the embeddings changes the loss a little, not more.
        assert result["sharded"] == pytest.approx(result["reference"], abs=1e-4, rel=0)


def test_fp32_all_to_all_has_no_codecs(ranks):
    for result in scenario(ranks, "equivalence"):
        all_to_all = result["summary"]["all_to_all"]
        assert all_to_all
        assert all(a["forward"] is None and a["backward"] is None for a in all_to_all)


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        (
            "fp16_codec_fails_on_rank1",
            r"fp16_all_to_all: TorchRec's FP16 qcomm codecs cannot run on cpu "
            r"\(RuntimeError: no FP16 quantize kernel for cpu\); set "
            r"sharding\.fp16_all_to_all=false .* \[failed on rank\(s\) \[1\] of 2\]",
        ),
        (
            "fp16_codecs_dropped",
            r"fp16_all_to_all: all-to-all\(s\) without FP16 codecs: .*'forward': None.* "
            r"\[failed on rank\(s\) \[0, 1\] of 2\]",
        ),
    ],
)
def test_fp16_all_to_all_impossible_raises_on_every_rank(ranks, name, pattern):
    errors = [result["error"] for result in scenario(ranks, name)]
    assert errors[0] is not None and errors[0] == errors[1]
    assert re.search(pattern, errors[0]), errors[0]


def test_meta_model_is_initialised_shard_by_shard(ranks):
    results = scenario(ranks, "meta")
    for result in results:
        assert result["on_meta"] == []
        assert all(abs(loss) < 10 and loss > 0 for loss in result["losses"])
        assert result["buffers"] == {"action_bits": [1, 2, 4], "task_weights": [1.0]}
        bounds = result["init_bounds"]
        assert set(bounds) == set(result["table_max_abs"])
        for name, value in result["table_max_abs"].items():
            assert 0 <= value <= bounds[name], name
        assert max(v / bounds[n] for n, v in result["table_max_abs"].items()) > 0.5
        first_rows = result["item_id_first_row_per_rank"]
        assert first_rows[0] != first_rows[1]  # each rank drew its own shard


def test_world_size_1(gloo_world_1, tiny_config, vocab, make_batch, caplog):
    cfg = tiny_config.replace(
        optimizer={"warmup_steps": 2},
        sharding={
            "sharding_types": (
                TableOption("item_id", "row_wise"),
                TableOption("uid", "table_wise"),
            )
        },
    )
    batches = [make_batch([12, 3, 5, 0], seed=seed) for seed in range(4)]
    seed_everything(0)
    reference = HSTURanker(cfg.model, vocab)
    ref_trainer = Trainer(reference, cfg)
    expected = [ref_trainer.train_step(b) for b in batches[:3]]

    seed_everything(0)
    with caplog.at_level(logging.INFO, logger="hstu_model.sharding"):
        dmp, summary = shard_model(HSTURanker(cfg.model, vocab), cfg, gloo_world_1)
    assert summary["world_size"] == 1
    assert summary["tables"]["item_id"]["sharding_type"] == "row_wise"
    assert summary["tables"]["item_id"]["ranks"] == [0]
    assert summary["tables"]["uid"]["sharding_type"] == "table_wise"
    assert (
        "sharding plan (rank 0 of 1): table item_id -> row_wise, kernel fused, ranks [0]"
        in caplog.messages
    )
    trainer = Trainer(dmp, cfg)
    got = [trainer.train_step(b) for b in batches[:3]]
    assert got == pytest.approx(expected, abs=TOLERANCE, rel=0)
    with torch.no_grad():
        b = batches[3]
        want = float(reference.loss(reference(b.uih, b.candidates).logits, b.labels))
        have = float(trainer.module.loss(dmp(b.uih, b.candidates).logits, b.labels))
    assert have == pytest.approx(want, abs=TOLERANCE, rel=0)
    result = trainer.evaluate([batches[3]])
    assert result.num_samples == 4 and result.loss == pytest.approx(want, abs=TOLERANCE)


def test_world_size_1_fp16_all_to_all(gloo_world_1, tiny_config, vocab):
    cfg = tiny_config.replace(sharding={"fp16_all_to_all": True})
    seed_everything(0)
    _, summary = shard_model(HSTURanker(cfg.model, vocab), cfg, gloo_world_1)
    assert summary["all_to_all"]
    assert all((a["forward"], a["backward"]) == ("FP16", "FP16") for a in summary["all_to_all"])


def test_unknown_override_table_is_named(gloo_world_1, tiny_config):
    # A model whose tables differ from the config's (other contextual features).
    cfg = tiny_config.replace(
        sharding={"sharding_types": (TableOption("user_x_hour", "row_wise"),)}
    )
    other = dataclasses.replace(tiny_config.model, contextual_features=(), contextual_seq_len=1)
    model = HSTURanker(other, {"uid": 3, "item_id": 5, "artist_id": 5, "album_id": 5})
    with pytest.raises(ConfigError, match=r"\['user_x_hour'\] are not tables of the model"):
        shard_model(model, cfg, gloo_world_1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_gpu_is_an_error(gloo_world_1, tiny_config, vocab):
    cfg = tiny_config.replace(sharding={"compute_device": "cuda"})
    with pytest.raises(ShardingError, match="compute_device: cuda, but torch sees no CUDA"):
        shard_model(HSTURanker(cfg.model, vocab), cfg, gloo_world_1)


def test_shard_model_needs_a_process_group(tiny_config, vocab):
    with pytest.raises(ShardingError, match=r"torch\.distributed is not initialised"):
        shard_model(HSTURanker(tiny_config.model, vocab), tiny_config)


def test_slice_batch_halves_make_the_whole(make_batch):
    batch = make_batch([3, 0, 5, 2])
    halves = [slice_batch(batch, 0, 2), slice_batch(batch, 2, 4)]
    for key in batch.uih.keys():  # noqa: SIM118 (a KeyedJaggedTensor, not a dict)
        whole = batch.uih[key]
        assert torch.equal(torch.cat([h.uih[key].values() for h in halves]), whole.values()), key
        assert torch.equal(torch.cat([h.uih[key].lengths() for h in halves]), whole.lengths()), key
    assert torch.equal(torch.cat([h.labels for h in halves]), batch.labels)
    assert halves[0].candidates.keys() == batch.candidates.keys()
    with pytest.raises(ValueError, match="not within a batch of 4"):
        slice_batch(batch, 3, 5)


def test_a_process_reduces_its_first_step_in_the_buckets_of_every_later_step(
    gloo_world_1, tiny_config, vocab, make_batch
):
    """Crash-exact resume rests on it: a resumed process's first step sums the ranks'
    gradients in the bucket layout the uninterrupted run used for that step, without DDP's
    search for unused parameters (sharding.FixedGradientBuckets). The buckets hold the
    parameters last to first, the order a backward's gradients come in."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    dmp, _ = shard_model(HSTURanker(tiny_config.model, vocab), tiny_config, gloo_world_1)
    ddp = dmp._dmp_wrapped_module
    assert isinstance(ddp, DistributedDataParallel)
    assert not ddp.find_unused_parameters and not ddp.static_graph
    names = {id(p): name for name, p in ddp.module.named_parameters()}
    layouts: list[list[list[str]]] = []

    def recording_allreduce(group, bucket):
        layouts[-1].append([names[id(p)] for p in bucket.parameters()])
        return allreduce_hook(group, bucket)

    ddp.register_comm_hook(None, recording_allreduce)
    trainer = Trainer(dmp, tiny_config)
    for step in range(3):
        layouts.append([])
        trainer.train_step(make_batch([5, 9, 12], seed=step))
    assert layouts[0] == layouts[1] == layouts[2]
    dense = [
        name
        for name, p in ddp.module.named_parameters()
        if p.requires_grad and name not in ddp.parameters_to_ignore  # the sharded tables
    ]
    assert [name for bucket in layouts[0] for name in bucket] == dense[::-1]
