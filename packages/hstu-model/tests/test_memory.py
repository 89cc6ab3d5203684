import torch

from hstu_model import preset
from hstu_model.config import TINY_VOCAB
from hstu_model.memory import (
    MemoryNeed,
    available_memory,
    dense_parameter_count,
    format_bytes,
    training_memory,
)
from hstu_model.overrides import resolve_config


def test_the_floor_counts_every_table_row_with_its_adagrad_state_and_adam_for_the_rest():
    model = preset("tiny").model
    need = training_memory(model, TINY_VOCAB)
    rows = sum(TINY_VOCAB.values()) + sum(model.contextual_tables().values())
    assert need.embedding_bytes == rows * (model.embedding_dim + 1) * 4
    assert need.dense_bytes == dense_parameter_count(model) * 16 > 0
    # Tables split over the ranks; the dense part is on every rank.
    assert need.per_rank(4) == -(-need.embedding_bytes // 4) + need.dense_bytes


def test_a_trillion_row_table_is_measured_without_allocating_it():
    model = preset("tiny").model
    huge = ",".join(
        f"{name}={10**12 if i == 0 else rows}"
        for i, (name, rows) in enumerate(model.contextual_tables().items())
    )
    config = resolve_config("tiny", environ={}, cli=[f"model.contextual_features={huge}"])
    need = training_memory(config.model, TINY_VOCAB)
    assert need.embedding_bytes > 10**12 * (model.embedding_dim + 1) * 4
    available, where = available_memory(torch.device("cpu"))
    assert 0 < available < need.per_rank(1) and "host" in where


def test_ranks_on_a_host_share_its_memory():
    one, _ = available_memory(torch.device("cpu"), 1)
    four, where = available_memory(torch.device("cpu"), 4)
    assert abs(four - one // 4) < one // 20 and "shared by 4 ranks" in where


def test_byte_counts_read_as_a_person_writes_them():
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**30) == "3.0 GiB"
    assert format_bytes(MemoryNeed(2**50, 0).per_rank(1)) == "1.0 PiB"
