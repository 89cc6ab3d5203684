import pytest

import hstu_ops


@pytest.fixture(autouse=True)
def _restore_default_kernel():
    """Tests may change the process default kernel; put it back afterwards."""
    saved = hstu_ops.get_default_kernel()
    yield
    hstu_ops.set_default_kernel(saved)
