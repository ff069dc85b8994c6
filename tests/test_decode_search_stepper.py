"""A search's step through the model (transformer_nmt.decode.search.stepper): the
log-probabilities a step sees, and the Stepper that feeds the model one token at a time."""

from __future__ import annotations

import pytest
import torch

from search_fixtures import BOS, PAD, SPECIAL, ToyModel, random_sources, tiny_transformer
from transformer_nmt.decode.search.stepper import Stepper, next_token_log_probs


def test_next_token_log_probs_are_float32_and_never_pad_or_bos():
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(0)).bfloat16()
    log_probs = next_token_log_probs(logits, SPECIAL)
    assert log_probs.dtype == torch.float32
    assert torch.isinf(log_probs[:, [PAD, BOS]]).all()
    # The other tokens keep the whole distribution's log-probabilities.
    expected = torch.log_softmax(logits.float(), dim=-1)
    keep = [token for token in range(8) if token not in (PAD, BOS)]
    torch.testing.assert_close(log_probs[:, keep], expected[:, keep])


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
def test_the_cached_stepper_gives_what_decoding_the_whole_prefix_gives(model):
    src = random_sources(3, 12, seed=4)
    tokens = torch.tensor([[BOS, 5, 6, 7], [BOS, 8, 9, 4], [BOS, 4, 4, 5]])
    with torch.inference_mode():
        cached = Stepper(model, model.encode(src), True, tokens.size(1))
        whole = Stepper(model, model.encode(src), False, tokens.size(1))
        for step in range(tokens.size(1)):
            torch.testing.assert_close(cached.log_probs(tokens, step, SPECIAL),
                                       whole.log_probs(tokens, step, SPECIAL))


def test_the_stepper_follows_rows_as_they_move_and_sentences_leave():
    model = ToyModel()
    src = random_sources(3, 12, seed=5)
    tokens = torch.tensor([[BOS, 5, 6], [BOS, 8, 9], [BOS, 4, 7]])
    with torch.inference_mode():
        stepper = Stepper(model, model.encode(src), True, 3)
        stepper.log_probs(tokens, 0, SPECIAL)
        # Sentence 1 leaves; sentence 2's row now comes first.
        order = torch.tensor([2, 0])
        stepper.reorder(order, order)
        moved = stepper.log_probs(tokens[order], 1, SPECIAL)
        alone = Stepper(model, model.encode(src[order]), False, 3)
        torch.testing.assert_close(moved, alone.log_probs(tokens[order], 1, SPECIAL))


def test_a_probed_layer_keeps_the_last_steps_attention():
    model = tiny_transformer()
    src = random_sources(2, 40, seed=6)
    tokens = torch.tensor([[BOS, 5, 6], [BOS, 8, 9]])
    with torch.inference_mode():
        stepper = Stepper(model, model.encode(src), True, 3, probe_layer=0)
        stepper.log_probs(tokens, 0, SPECIAL)
        stepper.log_probs(tokens, 1, SPECIAL)
        weighed = model.decode(tokens[:, :2], model.encode(src), need_weights=True)
    assert stepper.probed.shape == (2, model.cfg.heads, 1, src.size(1))
    torch.testing.assert_close(stepper.probed.float(),
                               weighed.cross_attention[0][:, :, -1:].float())
