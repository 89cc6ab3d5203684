"""ModelConfig.recompute_layers: the STU layers' activations recomputed in the backward give
the plain step's loss and gradients, and the step keeps less for its backward."""

from __future__ import annotations

import pytest
import torch

from hstu_model import PlainTableRanker, preset, seed_everything
from hstu_model.config import reference_departures
from hstu_model.testing import random_plain_batch


def step(config, vocab, recompute: bool, autocast: bool, hooks=None):
    """(loss, {parameter: gradient}) of one training step of a model seeded the same way."""
    seed_everything(0)
    model = PlainTableRanker(config.replace(model={"recompute_layers": recompute}).model, vocab)
    model.train()
    lengths = [5, 0, 12, 3]
    contextual = model.config.contextual_tables()
    batch = random_plain_batch(lengths, vocab, seed=3, contextual_tables=contextual)
    torch.manual_seed(7)  # the dropout masks: drawn again, the same, by the recomputation
    with hooks or torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(batch.uih, batch.candidates).logits
        loss = model.loss(logits.float(), batch.labels)
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("kernel", ["pytorch", "native"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_the_recomputed_step_gives_the_plain_steps_loss_and_gradients(
    tiny_config, vocab, kernel, autocast
):
    # Dropout everywhere it can be: the recomputation must draw the same masks.
    config = tiny_config.replace(
        model={"kernel": kernel, "input_dropout": 0.2, "linear_dropout": 0.3}
    )
    plain_loss, plain_grads = step(config, vocab, recompute=False, autocast=autocast)
    loss, grads = step(config, vocab, recompute=True, autocast=autocast)
    # Exact: the recomputation runs the same ops on the same inputs in the same order.
    assert torch.equal(loss, plain_loss)
    assert list(grads) == list(plain_grads)
    for name, grad in plain_grads.items():
        assert grad is not None, name
        assert torch.equal(grads[name], grad), name


def test_the_recomputed_step_keeps_less_for_its_backward(tiny_config, vocab):
    def saved(recompute: bool) -> int:
        seen, total = set(), [0]

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total[0] += storage.nbytes()
            return t

        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        step(tiny_config, vocab, recompute, autocast=False, hooks=hooks)
        return total[0]

    plain, recomputed = saved(False), saved(True)
    assert recomputed < 0.8 * plain, (recomputed, plain)


def test_recomputation_is_on_for_yambda_5b_and_free_in_the_closed_division():
    # The reference's Triton STU layers recompute in the backward; the function is the same
    # either way, so a closed run may choose. The CPU presets keep their activations.
    assert preset("yambda-5b").model.recompute_layers
    assert not preset("tiny").model.recompute_layers and not preset("small").model.recompute_layers
    config = preset("yambda-5b").replace(model={"recompute_layers": False})
    assert reference_departures(config) == []


def test_evaluation_and_no_grad_do_not_recompute(tiny_config, vocab, monkeypatch):
    config = tiny_config.replace(model={"recompute_layers": True}).model
    model = PlainTableRanker(config, vocab).eval()
    contextual = model.config.contextual_tables()
    batch = random_plain_batch([4, 2], vocab, seed=1, contextual_tables=contextual)
    calls = []
    original = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(
        torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    with torch.no_grad():
        model(batch.uih, batch.candidates)
    model.train()
    with torch.no_grad():
        model(batch.uih, batch.candidates)
    assert calls == []
    model(batch.uih, batch.candidates)
    assert len(calls) == model.config.num_layers
