"""What a rank says when another one is gone: the backend's own words, short."""

from __future__ import annotations

import pytest

from hstu_model.training.distributed import backend_words


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (
            "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection "
            "closed by peer [127.0.0.1]:50886. This is typically caused by a remote worker "
            "crashing. Check the logs of the remote worker before reporting an error. GLHF!",
            "Connection closed by peer [127.0.0.1]:50886",
        ),
        (
            "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
            "300000ms for recv operation to complete\nException raised from ...",
            "Timed out waiting 300000ms for recv operation to complete",
        ),
        ("NCCL error in: ProcessGroupNCCL.cpp:1969, remote process exited", None),
        ("", "RuntimeError"),
    ],
)
def test_a_lost_peer_is_told_in_the_backends_own_few_words(message, words):
    assert backend_words(RuntimeError(message)) == (words or message)
