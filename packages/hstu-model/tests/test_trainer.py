"""The unsharded trainer's sparse row-wise Adagrad against TorchRec's dense one."""

from __future__ import annotations

import pytest
import torch
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from hstu_model import Trainer
from hstu_model.optimizers import SparseRowWiseAdagrad

SHAPES = ([5, 3, 7], [4, 0, 6, 2], [1, 8])


def _dense_trainer(config, build):
    """The same trainer with dense table gradients and TorchRec's own optimizer."""
    trainer = Trainer(build(config, 0), config)
    for table in trainer.module.embedding_collection.embeddings.values():
        table.sparse = False
    opt = config.optimizer
    trainer.sparse_optimizers = [
        RowWiseAdagrad(trainer.module.embedding_parameters(), lr=opt.sparse_lr, eps=opt.sparse_eps)
    ]
    return trainer


def test_sparse_updates_equal_the_dense_ones(tiny_config, build, make_batch):
    sparse, dense = Trainer(build(tiny_config, 0), tiny_config), _dense_trainer(tiny_config, build)
    assert isinstance(sparse.sparse_optimizer, SparseRowWiseAdagrad)
    for step in range(6):
        batch = make_batch(SHAPES[step % 3], seed=step)
        assert sparse.train_step(batch) == pytest.approx(dense.train_step(batch), abs=1e-6)
        grads = [p.grad for p in sparse.module.embedding_parameters()]
        assert all(g is not None and g.is_sparse for g in grads)
    a, b = sparse.module.state_dict(), dense.module.state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-7, msg=name)
    sa = sparse.sparse_optimizer.state_dict()["state"]
    sb = dense.sparse_optimizer.state_dict()["state"]
    for index in sa:
        for key in ("sum", "step"):
            torch.testing.assert_close(sa[index][key], sb[index][key], rtol=1e-5, atol=1e-7)
    # Rows no batch touched keep their initial values and a zero sum.
    untouched = sa[0]["sum"].flatten() == 0
    assert untouched.any() and (~untouched).any()


def test_decays_are_refused_with_sparse_gradients():
    weight = torch.nn.Parameter(torch.ones(4, 2))
    weight.grad = torch.sparse_coo_tensor([[1]], torch.ones(1, 2), (4, 2), check_invariants=True)
    with pytest.raises(ValueError, match="weight_decay, lr_decay 0"):
        SparseRowWiseAdagrad([weight], lr=0.1, weight_decay=0.01).step()


def _adam_steps(trainer) -> set[float]:
    return {float(s["step"]) for s in trainer.dense_optimizer.state.values()}


def test_a_fresh_dense_adam_starts_after_the_references_zero_gradient_step(tiny_config, build):
    """The reference's `KeyedOptimizer.init_state` steps its dense Adam once on zero gradients
    when the run is built: step 1, zero moments, the weights as initialised."""
    model = build(tiny_config, 0)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(model, tiny_config)
    assert len(trainer.dense_optimizer.state) == len(trainer._dense_parameters)
    assert _adam_steps(trainer) == {1.0}
    for state in trainer.dense_optimizer.state.values():
        assert not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    for name, value in model.state_dict().items():
        assert torch.equal(value, initial[name]), name
    assert all(p.grad is None for p in trainer._dense_parameters)
    assert not trainer.sparse_optimizer.state_dict()["state"][0]["sum"].any()


def test_a_resumed_dense_adam_has_the_checkpoints_step(tiny_config, build, make_batch, tmp_path):
    from hstu_model import checkpoint as ck

    trainer = Trainer(build(tiny_config, 0), tiny_config)
    for step in range(3):
        trainer.train_step(make_batch(SHAPES[step], seed=step))
    assert _adam_steps(trainer) == {4.0}
    ck.save_checkpoint(tmp_path, trainer)
    resumed = Trainer(build(tiny_config, 1), tiny_config)
    ck.load_checkpoint(ck.latest(tmp_path), resumed)
    assert _adam_steps(resumed) == {4.0}  # no second zero-gradient step on resume
