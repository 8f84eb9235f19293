"""Step buffers (``sarlite.core.step_buffers.Rotation``): a few buffers handed out in
turn, so that a pass in many steps maps each once."""
import pytest
import torch

from sarlite.core.step_buffers import Rotation


def test_a_rotation_hands_back_the_buffer_taken_count_requests_earlier():
    rotation = Rotation(3, capacity_rows=4)
    taken = [rotation.take(4, (2,), torch.float32) for _ in range(6)]
    ptrs = [t.data_ptr() for t in taken]
    assert len(set(ptrs[:3])) == 3 and ptrs[3:] == ptrs[:3]


def test_a_taken_buffer_has_the_asked_shape_and_dtype_within_its_capacity():
    rotation = Rotation(1, capacity_rows=5)
    first = rotation.take(5, (3,), torch.float64)
    smaller = rotation.take(2, (3,), torch.float64)
    assert smaller.shape == (2, 3) and smaller.dtype == torch.float64
    assert smaller.data_ptr() == first.data_ptr()


def test_a_larger_request_or_another_dtype_gets_a_new_buffer():
    rotation = Rotation(1, capacity_rows=2)
    first = rotation.take(2, (3,), torch.float32)
    assert rotation.take(3, (3,), torch.float32).shape == (3, 3)
    assert rotation.take(2, (3,), torch.float64).dtype == torch.float64
    assert first.shape == (2, 3)                  # the old buffer is untouched


def test_a_rotation_needs_at_least_one_buffer():
    with pytest.raises(ValueError, match="at least one buffer"):
        Rotation(0)
