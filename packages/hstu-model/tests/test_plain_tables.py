"""PlainTableRanker: HSTURanker's function on plain torch tables and plain tensors, runnable
where TorchRec and fbgemm-gpu cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from hstu_model import HSTURanker, PlainTableRanker, seed_everything
from hstu_model.testing import random_batch, random_plain_batch

WITHOUT_TORCHREC = Path(__file__).with_name("without_torchrec.py")


@pytest.mark.parametrize("kernel", ["pytorch", "native"])
def test_plain_tables_compute_the_rankers_logits_and_gradients(tiny_config, vocab, kernel):
    config = tiny_config.replace(model={"kernel": kernel}).model
    seed_everything(0)
    ranker = HSTURanker(config, vocab)
    plain = PlainTableRanker(config, vocab)
    # The same names and shapes: the ranker's weights load as they are.
    assert {k: v.shape for k, v in plain.state_dict().items()} == {
        k: v.shape for k, v in ranker.state_dict().items()
    }
    plain.load_state_dict(ranker.state_dict(), strict=True)

    lengths, contextual = [5, 0, 12, 3], config.contextual_tables()
    batch = random_batch(lengths, vocab, seed=3, contextual_tables=contextual)
    plain_batch = random_plain_batch(lengths, vocab, seed=3, contextual_tables=contextual)
    results = []
    for model, uih, candidates in (
        (ranker, batch.uih, batch.candidates),
        (plain, plain_batch.uih, plain_batch.candidates),
    ):
        model.train()
        torch.manual_seed(7)  # the same dropout masks
        logits = model(uih, candidates).logits
        model.loss(logits, batch.labels).backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        results.append((logits.detach(), grads))
    (ranker_logits, ranker_grads), (plain_logits, plain_grads) = results
    torch.testing.assert_close(plain_logits, ranker_logits, rtol=1e-6, atol=1e-7)
    assert list(plain_grads) == list(ranker_grads)
    for name, grad in ranker_grads.items():
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(plain_grads[name], grad, rtol=1e-6, atol=1e-7, msg=name)


def test_a_plain_batch_missing_a_key_the_model_reads_is_refused(tiny_config, vocab):
    model = PlainTableRanker(tiny_config.model, vocab)
    batch = random_plain_batch([2, 1], vocab)
    del batch.candidates["item_candidate_artist_id"]
    with pytest.raises(ValueError, match=r"candidates: the batch lacks the key\(s\) \['item_"):
        model(batch.uih, batch.candidates)


def test_plain_table_ranker_trains_where_torchrec_and_fbgemm_cannot_be_imported():
    code = textwrap.dedent(
        """
        import sys

        for name in ("torchrec", "fbgemm_gpu", "torchrec.sparse.jagged_tensor"):
            try:
                __import__(name)
            except ImportError:
                continue
            raise SystemExit(f"{name} was imported")

        import torch

        from hstu_model import PlainTableRanker, preset
        from hstu_model.config import DEFAULT_VOCABS
        from hstu_model.testing import random_plain_batch

        config = preset("tiny").model
        vocab = DEFAULT_VOCABS["tiny"]
        torch.manual_seed(0)
        model = PlainTableRanker(config, vocab).train()
        batch = random_plain_batch(
            [4, 9], vocab, contextual_tables=config.contextual_tables()
        )
        logits = model(batch.uih, batch.candidates).logits
        model.loss(logits, batch.labels).backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        assert not missing, missing
        assert all(p.grad.isfinite().all() for p in model.parameters())
        loaded = sorted(
            m for m in sys.modules if m.split(".")[0] in ("torchrec", "fbgemm_gpu")
        )
        assert not loaded, loaded
        print("trained", tuple(logits.shape))
        """
    )
    done = subprocess.run(
        [sys.executable, str(WITHOUT_TORCHREC), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "trained (2, 1)"
