"""Induction and previous-token scores: the positions they read are the repeat and its earlier
occurrence, and the scores are attention weights averaged over exactly those positions."""

from __future__ import annotations

import pytest
import torch

from attnlab.explain import attention_maps
from attnlab.explain.induction import induction_scores, previous_token_scores, repeats


def test_repeats_finds_the_earlier_occurrence_of_every_row(make_repeated) -> None:
    batch = make_repeated(32, 16)
    second, length = repeats(batch["labels"])
    ids = batch["input_ids"]
    for b, (s, n) in enumerate(zip(second.tolist(), length.tolist())):
        assert 8 <= n <= 16
        assert torch.equal(ids[b, s - n : s - 1], ids[b, s : s + n - 1])  # the repeat, as far as it is input
        assert s + n - 1 == ids.shape[1]  # the repeat ends the row


def test_scores_are_the_attention_on_the_named_positions(tiny_model, make_repeated) -> None:
    model = tiny_model("gpt", vocab_size=60)
    batch = make_repeated(32, 4)
    weights = [w for w in attention_maps(model, batch).values()]
    second, length = repeats(batch["labels"])
    s, n = int(second[0]), int(length[0])
    expected = torch.stack(
        [w[0, :, s + torch.arange(n - 1), s - n + 1 + torch.arange(n - 1)].mean(-1) for w in weights]
    )
    one_row = {k: v[:1] for k, v in batch.items()}
    torch.testing.assert_close(induction_scores(model, one_row), expected)
    previous = previous_token_scores(model, batch)
    assert previous.shape == (2, 4)
    torch.testing.assert_close(previous[1, 2], weights[1][:, 2].diagonal(-1, -2, -1).mean())


def test_rows_without_a_repeat_are_refused() -> None:
    with pytest.raises(ValueError, match="every row needs a labelled repeat"):
        repeats(torch.full((2, 5), -100))


@pytest.fixture
def make_repeated(tmp_path):
    """``make_repeated(seq_len, rows)``: a batch of repeated-segment rows from the data module."""
    from torch.utils.data import default_collate

    from attnlab.data import build_datamodule
    from attnlab.schema.model import GPTConfig
    from attnlab.schema.pos import pos_config
    from attnlab.schema.synthetic_data import RepeatedSegmentsData
    from attnlab.schema.task import CausalLMTask

    def make(seq_len: int, count: int) -> dict:
        data = RepeatedSegmentsData(seq_len=seq_len, num_train=8, num_val=count, num_test=8)
        model_cfg = GPTConfig(vocab_size=0, pos=pos_config("learned"))  # sized by the data
        dm = build_datamodule(data, needs=CausalLMTask.data_needs, seed=0, model_cfg=model_cfg)
        dm.setup()
        return default_collate([dm.datasets["val"][i] for i in range(count)])

    return make
