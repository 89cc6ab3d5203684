import os
import sys

import pytest
import torch

from dlrmv4_train.fork_memory import MIN_BYTES, exclude_from_forks

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_DONTFORK")


def _child_maps_address(address: int) -> bool:
    """Whether a forked child has a mapping that holds `address`."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads its own map and reports, touching no tensor
        os.close(read)
        held = False
        with open("/proc/self/maps") as maps:
            for line in maps:
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                held = held or low <= address < high
        os.write(write, b"1" if held else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    return answer == b"1"


@linux_only
def test_a_large_tensor_is_left_out_of_a_forked_child_and_kept_in_the_parent():
    table = torch.arange(MIN_BYTES // 4, dtype=torch.float32)
    middle = table.data_ptr() + table.nbytes // 2
    assert _child_maps_address(middle)
    marked = exclude_from_forks([table, table[10:]])  # a view of the same storage counts once
    assert table.nbytes - 2 * 4096 <= marked <= table.nbytes
    assert not _child_maps_address(middle)
    assert torch.equal(table[-3:], torch.arange(MIN_BYTES // 4 - 3, MIN_BYTES // 4).float())
    table.add_(1)  # the parent still writes its own pages


@linux_only
def test_small_and_sparse_tensors_are_not_marked():
    small = torch.zeros(MIN_BYTES // 4 - 1)
    sparse = torch.zeros(MIN_BYTES // 4 + 1024).to_sparse()
    assert exclude_from_forks([small, sparse]) == 0
    assert _child_maps_address(small.data_ptr() + small.nbytes // 2)
