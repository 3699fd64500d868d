"""The attention switches compose with every family they apply to, and are refused where they do not.

Each case composes ``attnlab-train``'s config in-process (Hydra, the schema's rules), builds the data
module, model and task as the command does, and trains a few optimiser steps on one batch with the
task's own optimiser (``optim=muon`` included): the loss falls. Where a switch has no meaning (packing
for images or pairs), validation refuses it in one line naming the key.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from attnlab.run.bad_input import one_line
from attnlab.run.configs import register_schemas
from attnlab.run.prepared import build_datamodule_for, build_model_for
from attnlab.run.presets import config_dir
from attnlab.schema.checks import validate
from attnlab.tasks import build_task

pytestmark = pytest.mark.slow  # in-process, tiny: about a second per case

SWITCHES = {
    "attn_window": ["model.attn_window=3"],
    "qk_norm": ["model.qk_norm=true"],
    "packing": ["data.packing=documents"],
    "muon": ["optim=muon"],
}
FAMILIES = {  # tiny presets on small data
    "gpt": ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4"],
    "bert": ["model=bert-tiny", "task=mlm", "data=text", "data.seq_len=16", "data.batch_size=4"],
    "seq2seq": [
        "model=seq2seq-tiny",
        "data.num_train=64",
        "data.num_val=8",
        "data.num_test=8",
        "data.batch_size=4",
    ],
    "vit": ["model=vit-tiny", "data.batch_size=4"],
}
APPLIES = {"packing": ("gpt", "bert")}  # the others apply to every family


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> list[str]:
    """``data.path`` of text made of separate documents, for the text families."""
    path = tmp_path_factory.mktemp("docs") / "docs.txt"
    path.write_text("\n\n".join(f"doc {i}: " + "the cat sat on the mat. " * (1 + i % 4) for i in range(60)))
    return [
        f"data.path={path}",
        "data.document_separator='\\n\\n'",
        "data.val_fraction=0.1",
        "data.test_fraction=0.1",
    ]


def run_config(*overrides: str):
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return validate(compose("train", overrides=[*overrides, "trainer.max_steps=4"]))


def overrides(family: str, switch: str, documents: list[str]) -> list[str]:
    text = documents if family in ("gpt", "bert") else []
    return [*FAMILIES[family], *text, *SWITCHES[switch]]


@pytest.mark.parametrize("switch", list(SWITCHES))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_trains_with_each_switch_where_it_applies(family: str, switch: str, documents) -> None:
    args = overrides(family, switch, documents)
    if family not in APPLIES.get(switch, FAMILIES):
        with pytest.raises(Exception) as refused:
            run_config(*args)
        kind = "dates" if family == "seq2seq" else "digits"
        expected = f"data.packing=documents: not a key of data.kind={kind}; it is a key of data.kind=text"
        assert one_line(refused.value, args).startswith(expected)
        return
    run = run_config(*args)
    datamodule = build_datamodule_for(run)
    task = build_task(
        run.task,
        run.optim,
        build_model_for(run, datamodule),
        tokenizer=datamodule.tokenizer,
        num_classes=datamodule.num_classes,
        max_steps=run.trainer.max_steps,
    ).train()
    optimizer = task.configure_optimizers()["optimizer"]
    batch = next(iter(datamodule.train_dataloader()))
    if switch == "packing":
        assert batch["document_ids"].shape == batch["input_ids"].shape
    losses = []
    for _ in range(4):
        loss = task.training_step(batch, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    if switch == "muon":
        assert type(optimizer).__name__ == "MuonWithAdamW"
