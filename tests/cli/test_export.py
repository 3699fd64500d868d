"""attnlab-export format=hf end to end: models trained a few steps by attnlab-train leave attnlab as
Hugging Face directories that ``transformers``' Auto classes load, with attnlab's logits (float32, a
padded batch), its greedy tokens and its tokenizer's ids; ``load_hf`` reads the directory back to the
same weights; a model no architecture holds, and bad paths, are one line, exit 2, nothing written.

The commands run in-process through Hydra, as the console scripts do (see test_compress.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from train_cli import run_command, tiny_checkpoints

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # end to end: trains tiny runs (seconds each), then exports them

TOL = 1e-5
GPT = ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4"]
LLAMA = [  # RoPE with YaRN scaling, RMSNorm, SwiGLU, grouped-query attention, untied head, BPE
    "model=gpt-tiny",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "pos=rope",
    "model.pos.rope_scaling=yarn",
    "model.pos.rope_factor=2.0",
    "model.norm=rmsnorm",
    "model.activation=swiglu",
    "model.bias=false",
    "model.tie_embeddings=false",
    "data.tokenizer=bpe",
    "data.bpe_vocab_size=300",
    "data.seq_len=16",
    "data.batch_size=4",
]
MIXER_PRESETS = {"deepseek_v3": "DeepseekV3ForCausalLM", "diffllama": "DiffLlamaForCausalLM"}
MIXER_PRESETS |= {"qwen3_next": "Qwen3NextForCausalLM"}
BERT = ["model=bert-tiny", "model.norm_first=false", "model.embed_norm=true"]  # BERT's post-norm layout
LISTOPS = [
    "data.num_train=64",
    "data.num_val=16",
    "data.num_test=16",
    "data.seq_len=48",
    "data.batch_size=8",
    "data.listops_max_depth=2",
]
RUNS = {
    "gpt2": GPT,
    "llama": LLAMA,
    "mistral": [*LLAMA, "model.attn_window=4"],
    "qwen3": [*LLAMA, "model.qk_norm=true"],
    "sinusoidal": [*GPT, "pos=sinusoidal"],
    # the mixers' presets: latent attention, differential attention, gated DeltaNet with gated attention
    **{preset: [f"model={preset}", "data.seq_len=16", "data.batch_size=4"] for preset in MIXER_PRESETS},
    "bloom": [*GPT, "pos=alibi", "model.embed_norm=true", "model.activation=gelu_tanh"],
    "marian": [  # Marian's layout: concatenated sinusoids, post-norm, scaled embeddings, a logits bias
        "model=seq2seq-tiny",
        "model.pos.layout=concat",
        "model.norm_first=false",
        "model.lm_head_bias=true",
        *LISTOPS[:3],
        "data.batch_size=8",
    ],
    "vit": ["model=vit-tiny", "model.image_size=8", "model.patch_size=2", "data.batch_size=8"],
    "t5": [  # T5 v1.0's layout: relative bias, RMSNorm, pre-norm, no biases, unscaled attention
        "model=seq2seq-tiny",
        "pos=relative",
        "model.norm=rmsnorm",
        "model.bias=false",
        "model.attn_scale=1.0",
        "model.embed_scale=false",
        "model.tied_output_scale=true",
        "model.norm_first=true",
        *LISTOPS[:3],
        "data.batch_size=8",
    ],
    "bert-mlm": [*BERT, "task=mlm", "data=text", "data.seq_len=16", "data.batch_size=4"],
    "bert-classifier": [*BERT, "model.classifier_hidden=true", *LISTOPS],
}
RUNS["t5-v1.1"] = [  # T5 v1.1's: gated GELU (tanh) feed-forward, untied head, unscaled logits
    *RUNS["t5"],
    "model.activation=geglu_tanh",
    "model.tie_embeddings=false",
    "model.tied_output_scale=false",
]
COMMON = [
    "trainer.max_steps=3",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "trainer.val_every_n_steps=3",
    "trainer.limit_val_batches=1",
]
CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}
CLASSES |= {"qwen3": "Qwen3ForCausalLM", "bloom": "BloomForCausalLM", **MIXER_PRESETS}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


def export(ckpt: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """attnlab-export's exit status and its stderr."""
    from attnlab.cli.export import main

    with pytest.MonkeyPatch.context() as patch:
        code = run_command(main, [f"ckpt_path={ckpt}", f"out={out}"], patch, capsys)
    return code, capsys.readouterr().err


def padded_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (3, 12) and a right-padding mask: rows of 12, 8 and 4 real tokens."""
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (3, 12))
    return ids, (torch.arange(12) < torch.tensor([12, 8, 4])[:, None]).long()


@pytest.mark.parametrize("arch", list(CLASSES))
def test_export_loads_in_transformers_with_attnlabs_numbers(
    arch: str, checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.checkpoint import load_checkpoint
    from attnlab.data.text import default_corpus
    from attnlab.generate.decoder import generate
    from attnlab.models.hf import load_hf

    out = tmp_path / arch
    bars = transformers.utils.logging.is_progress_bar_enabled()
    code, err = export(checkpoint(arch), out, capsys)
    assert code == 0, err
    # its check that the folder loads draws no "Loading weights" bar, and leaves transformers' bars as they were
    assert "Loading weights" not in err and "it/s]" not in err, err
    assert transformers.utils.logging.is_progress_bar_enabled() == bars
    loaded = load_checkpoint(checkpoint(arch))
    ours = loaded.model.eval()
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    assert type(hf).__name__ == CLASSES[arch]

    ids, mask = padded_batch(ours.cfg.vocab_size)
    with torch.no_grad():
        theirs_logits, our_logits = hf(ids, attention_mask=mask).logits, ours(ids, attention_mask=mask)
    real = mask.bool()  # padded positions' logits are free in both
    assert (theirs_logits[real] - our_logits[real]).abs().max().item() < TOL

    back = load_hf(out).state_dict()
    assert back.keys() == ours.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())

    prompt = ids[:1, :5]
    with torch.no_grad():
        greedy = hf.generate(
            prompt, max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(prompt)
        )
    assert greedy[0, 5:].tolist() == generate(ours, prompt, max_new_tokens=8, temperature=0.0)[0]

    corpus = default_corpus()[:2000]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(corpus)["input_ids"] == loaded.tokenizer.encode(corpus)
    lines = tokenizer(corpus.splitlines(keepends=True))["input_ids"]  # as attnlab reads a corpus
    assert [i for line in lines for i in line] == loaded.tokenizer.encode_corpus(corpus)


@pytest.mark.parametrize("task", ["mlm", "classifier"])
def test_bert_exports_as_a_masked_lm_or_a_classifier(
    task: str, checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.checkpoint import load_checkpoint
    from attnlab.models.hf import load_hf

    out = tmp_path / task
    code, err = export(checkpoint(f"bert-{task}"), out, capsys)
    assert code == 0, err
    loaded = load_checkpoint(checkpoint(f"bert-{task}"))
    ours, tokenizer = loaded.model.eval(), transformers.AutoTokenizer.from_pretrained(out)
    auto = (
        transformers.AutoModelForMaskedLM
        if task == "mlm"
        else transformers.AutoModelForSequenceClassification
    )
    hf = auto.from_pretrained(out, attn_implementation="eager").eval()

    ids, mask = padded_batch(ours.cfg.vocab_size)
    with torch.no_grad():
        theirs, hidden = hf(ids, attention_mask=mask).logits, ours(ids, mask)
        if task == "mlm":
            gap = (theirs - ours.mlm_logits(hidden))[mask.bool()]
        else:
            gap = theirs - ours.classify(hidden, mask)
    assert gap.abs().max().item() < TOL

    back = load_hf(out).state_dict()
    for name, weight in ours.state_dict().items():
        assert torch.equal(back[name], weight), name
    assert not back["embed.segments.weight"].any()  # attnlab's BERT has no segments: one row of zeros

    words = sorted(t for t in loaded.tokenizer.hf.get_vocab() if not t.startswith("<"))
    text = (" " if loaded.tokenizer.split == "space" else "").join(words)
    cls = [loaded.tokenizer.cls_id] if task == "classifier" else []  # what the classifier reads first
    assert tokenizer(text)["input_ids"] == cls + loaded.tokenizer.encode(text)


@pytest.mark.parametrize(
    ("arch", "cls"),
    [
        ("t5", "T5ForConditionalGeneration"),
        ("t5-v1.1", "T5ForConditionalGeneration"),
        ("marian", "MarianMTModel"),
    ],
)
def test_encoder_decoders_export_with_attnlabs_logits_and_greedy_tokens(
    arch: str, cls: str, checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.checkpoint import load_checkpoint
    from attnlab.generate.seq2seq import greedy_decode
    from attnlab.models.hf import load_hf

    out = tmp_path / arch
    bars = transformers.utils.logging.is_progress_bar_enabled()
    code, err = export(checkpoint(arch), out, capsys)
    assert code == 0, err
    # its check that the folder loads draws no "Loading weights" bar, and leaves transformers' bars as they were
    assert "Loading weights" not in err and "it/s]" not in err, err
    assert transformers.utils.logging.is_progress_bar_enabled() == bars
    loaded = load_checkpoint(checkpoint(arch))
    ours, tok = loaded.model.eval(), loaded.tokenizer
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out, attn_implementation="eager").eval()
    assert type(hf).__name__ == cls

    src, mask = padded_batch(ours.cfg.vocab_size)
    tgt, tgt_mask = src[:, :7], mask[:, :7]
    with torch.no_grad():
        theirs = hf(
            input_ids=src, attention_mask=mask, decoder_input_ids=tgt, decoder_attention_mask=tgt_mask
        )
        gap = (theirs.logits - ours(src, tgt, mask, tgt_mask))[tgt_mask.bool()]
    assert gap.abs().max().item() < TOL

    back = load_hf(out).state_dict()
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())

    prompt = src[:1, :6]
    mine = greedy_decode(ours, prompt, bos_id=tok.bos_id, eos_id=tok.eos_id, max_new_tokens=8)[0]
    with torch.no_grad():
        greedy = hf.generate(prompt, max_new_tokens=8, do_sample=False, eos_token_id=tok.eos_id)[
            0, 1:
        ].tolist()
    assert mine and greedy[: len(mine)] == mine
    assert len(greedy) == len(mine) or greedy[len(mine)] == tok.eos_id


def test_a_model_no_architecture_holds_is_one_line_and_writes_nothing(
    checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sinusoidal"
    code, err = export(checkpoint("sinusoidal"), out, capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        "error: model.pos.name=sinusoidal: no Hugging Face architecture holds this model; the nearest, "
        "GPT2LMHeadModel, needs model.pos.name=learned"
    ]
    assert list(tmp_path.iterdir()) == []


def test_bad_paths_are_one_line(checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    code, err = export(checkpoint("gpt2"), tmp_path / "taken", capsys)
    assert (code, err.strip()) == (2, f"error: out={tmp_path / 'taken'}: exists: name a new folder to create")
    code, err = export(tmp_path / "none.ckpt", tmp_path / "new", capsys)
    assert code == 2 and err.startswith("error: ckpt_path=") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists()
    sharded = tmp_path / "sharded.ckpt"  # the layout of checkpoint.sharded=true: a folder
    sharded.mkdir()
    (sharded / ".metadata").touch()
    (sharded / "meta.pt").touch()
    code, err = export(sharded, tmp_path / "new", capsys)
    assert code == 2 and f"write it as one file first with: attnlab-consolidate {sharded}" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "new").exists()


def test_an_int8_checkpoint_is_refused(
    checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.cli.compress import main

    int8 = tmp_path / "int8.ckpt"
    with pytest.MonkeyPatch.context() as patch:
        assert (
            run_command(main, [f"ckpt_path={checkpoint('gpt2')}", "method=int8", f"out={int8}"], patch) == 0
        )
    code, err = export(int8, tmp_path / "out", capsys)
    assert (code, err.strip()) == (
        2,
        f"error: ckpt_path={int8}: is compressed (int8): export the checkpoint of attnlab-train it was made from",
    )
    assert not (tmp_path / "out").exists()


def test_vit_exports_as_an_image_classifier(
    checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.checkpoint import load_checkpoint
    from attnlab.models.hf import load_hf

    code, err = export(checkpoint("vit"), tmp_path / "vit", capsys)
    assert code == 0, err
    ours = load_checkpoint(checkpoint("vit")).model.eval()
    hf = transformers.AutoModelForImageClassification.from_pretrained(
        tmp_path / "vit", attn_implementation="eager"
    )
    torch.manual_seed(0)
    images = torch.randn(3, ours.cfg.channels, 8, 8)
    with torch.no_grad():
        assert (hf.eval()(images).logits - ours(images)).abs().max().item() < TOL
    back = load_hf(tmp_path / "vit").state_dict()
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())


def test_the_exported_image_processor_prepares_an_image_as_attnlab_does(
    checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``AutoImageProcessor`` of the export + the exported model: attnlab's logits for an image file
    at the model's size, read and normalised as attnlab-sample reads it (the run's mean and std)."""
    import numpy as np
    from PIL import Image

    from attnlab.checkpoint import image_normalisation, load_checkpoint, run_datamodule
    from attnlab.data.image_loading import load_images

    code, err = export(checkpoint("vit"), tmp_path / "vit", capsys)
    assert code == 0, err
    loaded = load_checkpoint(checkpoint("vit"))
    ours = loaded.model.eval()
    mean, std = image_normalisation(run_datamodule(loaded))
    assert abs(mean.item()) > 0.05 and abs(std.item() - 1) > 0.05  # the normalisation is not a no-op
    path = tmp_path / "digit.png"
    pixels = np.random.default_rng(0).integers(0, 256, (8, 8), dtype=np.uint8)
    Image.fromarray(pixels, "L").save(path)

    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "vit")
    hf = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "vit").eval()
    theirs = processor(Image.open(path), return_tensors="pt")["pixel_values"]
    mine = load_images([path], image_size=8, channels=ours.cfg.channels, mean=mean, std=std)
    assert (theirs - mine).abs().max().item() < 1e-6
    with torch.no_grad():
        assert (hf(theirs).logits - ours(mine)).abs().max().item() < TOL


def test_a_leftover_temporary_link_is_never_written_through(
    checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each export writes into a temporary folder of its own: ``<out>.tmp`` left over (here a link to a
    folder elsewhere) is neither written through nor removed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not attnlab's\n")
    (tmp_path / "hf.tmp").symlink_to(outside, target_is_directory=True)
    code, err = export(checkpoint("gpt2"), tmp_path / "hf", capsys)
    assert code == 0, err
    assert [p.name for p in outside.iterdir()] == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "not attnlab's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "hf.tmp", "outside"]


def test_an_export_finding_its_folder_written_meanwhile_is_one_line(checkpoint, tmp_path: Path) -> None:
    """The rename that publishes the folder fails where another export published first; the folder
    stays the other's and no temporary folder is left."""
    from attnlab.checkpoint import load_checkpoint
    from attnlab.export import write_hf

    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{}")  # the other export's
    loaded = load_checkpoint(checkpoint("gpt2"))
    with pytest.raises(ValueError) as err:
        write_hf(loaded.model, out, loaded.tokenizer)
    assert str(err.value) == f"out={out}: was written meanwhile by another process: name a new folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    assert [p.name for p in out.iterdir()] == ["config.json"]


def test_two_exports_to_one_folder_at_once_one_succeeds_the_other_is_one_line(
    checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both find ``out`` new; the other export publishes its finished folder first (renamed to ``out``
    between this command's writing and its publishing: the order two processes at once can take), so
    this command's rename finds ``out`` taken: exit 2, one line, no traceback, the other's folder whole,
    nothing left behind."""
    import os

    import attnlab.export.hf as hf
    from attnlab import run
    from attnlab.cli.export import main

    out, other = tmp_path / "hf", tmp_path / "other"
    args = [f"ckpt_path={checkpoint('gpt2')}", f"out={out}"]
    run.export(run.command_config("export", [args[0], f"out={other}"]))  # the other, but for its publish
    written = sorted(p.name for p in other.iterdir())
    publish = hf.publish

    def the_other_publishes_first(folder: Path, to: Path) -> None:
        if other.exists():  # the other export's publish: its folder renamed to out
            os.rename(other, to)
        publish(folder, to)

    monkeypatch.setattr(hf, "publish", the_other_publishes_first)
    code = run_command(main, args, monkeypatch, capsys)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"error: out={out}: was written meanwhile by another process: name a new folder"
    ), err
    assert sorted(p.name for p in out.iterdir()) == written and "config.json" in written
    assert not list(tmp_path.glob("*.tmp"))
