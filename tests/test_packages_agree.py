"""Facts of the reference that two packages state because each must work alone: they agree.

hstu-model does not depend on yambda-data (the dlrmv4-train package wires the two), and yambda-data
does not depend on hstu-model, so the reference's seven cross features are written in both:
their names, order and table sizes in hstu-model's yambda-5b preset (the model's tables), and
their keys, salts and the same sizes in yambda-data (the hashing of the data pipeline used
alone). The run hashes into the model's sizes (`model_crosses`); this test keeps the two lists
from drifting apart.
"""

from dlrmv4_train.run_config import model_crosses
from hstu_model.config import YAMBDA_5B_CONTEXTUAL_FEATURES, preset
from yambda_data import CROSS_FEATURES


def test_the_reference_crosses_have_the_same_names_order_and_sizes_in_both_packages():
    assert [(f.name, f.num_embeddings) for f in YAMBDA_5B_CONTEXTUAL_FEATURES] == [
        (f.name, f.table_size) for f in CROSS_FEATURES
    ]


def test_a_run_hashes_into_the_models_table_sizes():
    for name in ("yambda-5b", "tiny"):
        model = preset(name).model
        crosses = model_crosses(model)
        assert {c.name: c.table_size for c in crosses} == model.contextual_tables()
        keys = {f.name: (f.keys, f.salt) for f in CROSS_FEATURES}
        assert all((c.keys, c.salt) == keys[c.name] for c in crosses)
