"""Dropout that keeps a bool mask for backward (model/dropout.py): the fraction p dropped,
the rest scaled, the gradient masked, the mask one byte and drawn from the seed, at any
size, dtype and layout."""

from __future__ import annotations

import pytest
import torch

from transformer_nmt.model.dropout import bool_mask_dropout


def test_dropout_zeroes_a_fraction_p_scales_the_rest_and_masks_the_gradient():
    torch.manual_seed(0)
    x = torch.rand(3000, 500) + 1.0  # no zeros of its own; more than one chunk of draws
    x.requires_grad_()
    y = bool_mask_dropout(x, 0.1, training=True)
    dropped = y.eq(0).view(-1, 4).float()  # every mask element's 16-bit lane of a word
    for lane in range(4):
        assert abs(dropped[:, lane].mean().item() - 0.1) < 0.005
    assert abs(y.view(-1)[2**20:].eq(0).float().mean().item() - 0.1) < 0.005  # second chunk
    kept = y.ne(0)
    scale = 65536 / round(0.9 * 65536)  # p rounded to a multiple of 1/65536
    torch.testing.assert_close(y[kept], x[kept] * scale)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() * scale)
    assert bool_mask_dropout(x, 0.1, training=False) is x
    assert bool_mask_dropout(x, 0.0, training=True) is x


def test_dropout_masks_are_bool_and_follow_the_seed():
    x = torch.ones(3, 1000, requires_grad=True)
    saved: list[torch.Tensor] = []
    torch.manual_seed(1)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        first = bool_mask_dropout(x, 0.3, training=True)
    assert [(t.dtype, t.shape) for t in saved] == [(torch.bool, x.shape)]
    torch.manual_seed(1)
    assert torch.equal(first, bool_mask_dropout(x, 0.3, training=True))
    # p outside the 16-bit grid takes the exact path.
    assert bool_mask_dropout(x, 1.0, training=True).eq(0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1,), (2, 3), (5, 4, 9)])
def test_dropout_of_any_size_dtype_and_layout_masks_consistently(dtype, shape):
    torch.manual_seed(0)
    x = (torch.rand(shape) + 1.0).to(dtype)
    for source in (x, x.transpose(0, -1)):  # contiguous, and (when 2-D or more) not
        source = source.detach().requires_grad_()
        y = bool_mask_dropout(source, 0.5, training=True)
        assert y.shape == source.shape and y.dtype == dtype
        kept = y.ne(0)
        torch.testing.assert_close(y[kept], source[kept] * 2)
        y.float().sum().backward()
        torch.testing.assert_close(source.grad, kept.to(dtype) * 2)
