"""``model.init_from=<Hugging Face checkpoint dir>``: the run takes the checkpoint's family, sizes and
weights, and a size that contradicts it stops the run before it starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from train_cli import TEXT, TINY, check, command_here

from attnlab.data import build_datamodule
from attnlab.schema.data import TextData
from attnlab.schema.model import GPTConfig
from attnlab.schema.task import CausalLMTask

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, torch.nn.Module]:
    """A tiny GPT-2 over the vocabulary of the default corpus' char tokenizer, and that tokenizer."""
    root = tmp_path_factory.mktemp("hf")
    data = build_datamodule(TextData(), needs=CausalLMTask.data_needs, seed=0, model_cfg=GPTConfig())
    data.setup()
    data.tokenizer.save(root / "tokenizer")
    config = transformers.GPT2Config(
        vocab_size=data.vocab_size, n_embd=32, n_layer=2, n_head=2, n_positions=64
    )
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(root / "gpt2")
    return root / "gpt2", root / "tokenizer", model


def test_training_starts_from_the_pretrained_weights(pretrained: tuple, tmp_path: Path) -> None:
    hf_dir, tokenizer, hf_model = pretrained
    args = [
        *TINY,
        *TEXT,
        f"model.init_from={hf_dir}",
        f"data.tokenizer={tokenizer}",
        "logger=csv",
        "trainer.max_steps=1",
        "optim.lr=1e-9",
        "optim.warmup_steps=0",
        "optim.schedule=constant",
    ]
    check(command_here(args, tmp_path))
    (run,) = tmp_path.glob("outputs/*/*")
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert state["model.embed.tokens.weight"].shape == (hf_model.config.vocab_size, 32)
    torch.testing.assert_close(
        state["model.embed.tokens.weight"], hf_model.transformer.wte.weight, atol=1e-6, rtol=0
    )
    assert "  n_layers: 2\n" in (run / "config.yaml").read_text()


def test_every_free_field_reaches_the_pretrained_model(pretrained: tuple, tmp_path: Path) -> None:
    """Fields a run may set on top of a pretrained checkpoint (regularisation, init of fresh heads) are
    those of the model trained, so the checkpoint's model config and config.yaml say what it was."""
    hf_dir, tokenizer, _ = pretrained
    free = ["model.dropout=0.2", "model.attn_dropout=0.1", "model.init_std=0.05"]
    args = [*TINY, *TEXT, f"model.init_from={hf_dir}", f"data.tokenizer={tokenizer}", "logger=csv", *free]
    check(command_here([*args, "trainer.max_steps=1"], tmp_path))
    (run,) = tmp_path.glob("outputs/*/*")
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    built = ckpt["hyper_parameters"]["model"]
    assert (built["dropout"], built["attn_dropout"], built["init_std"]) == (0.2, 0.1, 0.05)
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert (saved["dropout"], saved["attn_dropout"], saved["init_std"]) == (0.2, 0.1, 0.05)


def test_a_contradicting_size_is_refused(pretrained: tuple, tmp_path: Path) -> None:
    hf_dir, tokenizer, _ = pretrained
    result = command_here(
        [f"model.init_from={hf_dir}", f"data.tokenizer={tokenizer}", "model.n_layers=6"], tmp_path
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: model.n_layers=6: contradicts the checkpoint model.init_from={hf_dir}, which has n_layers=2; "
        "leave it out to take the checkpoint's"
    )
    assert not (tmp_path / "outputs").exists()


def test_weights_that_would_run_code_are_refused_before_the_run_directory(
    pretrained: tuple, tmp_path: Path
) -> None:
    """A pickled pytorch_model.bin was refused after the run directory existed, passing on torch's
    advice to load it with weights_only=False."""
    import shutil

    from train_cli import RunsCode

    hf_dir, tokenizer, _ = pretrained
    evil = Path(shutil.copytree(hf_dir, tmp_path / "evil"))
    (evil / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": RunsCode(tmp_path / "ran")}, evil / "pytorch_model.bin")
    result = cli([*TINY, *TEXT, f"model.init_from={evil}", f"data.tokenizer={tokenizer}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: model.init_from={evil}: {evil / 'pytorch_model.bin'}: holds pickled objects beyond tensors and "
        "plain data, which could run code, so it is not loaded"
    )
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "ran").exists()
