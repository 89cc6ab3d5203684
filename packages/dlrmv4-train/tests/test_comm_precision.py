"""The communication precision a run declares, from its sharded model's all-to-all codecs."""

from __future__ import annotations

import pytest

from dlrmv4_train.run import comm_precision


def _a2a(forward, backward):
    return {"sharding": "row_wise", "forward": forward, "backward": backward}


@pytest.mark.parametrize(
    ("all_to_all", "declared"),
    [
        ([], "fp32"),  # unsharded, or every table data_parallel: no embedding all-to-all
        ([_a2a(None, None)], "fp32"),  # no codec: fp32 tensors
        ([_a2a("FP32", "FP32")], "fp32"),
        ([_a2a("FP16", "FP16")], "fp16"),  # sharding.fp16_all_to_all
        ([_a2a(None, None), _a2a("FP16", None)], "fp16"),  # the lowest of all counts
        ([_a2a("BF16", "FP32")], "bfloat16"),
    ],
)
def test_the_lowest_codec_is_declared(all_to_all, declared):
    assert comm_precision(all_to_all) == declared


def test_a_codec_without_an_mlperf_name_is_refused():
    with pytest.raises(ValueError, match=r"all-to-all codec\(s\) \['FP4'\]"):
        comm_precision([_a2a("FP4", "FP32")])
