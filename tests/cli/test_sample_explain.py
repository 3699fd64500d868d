"""attnlab-sample and attnlab-explain end to end, on tiny checkpoints that attnlab-train writes here.

Both commands share these checkpoints (one tiny run per default experiment, ~1 s each), so the
tests of both live in this file. The entry points run in-process through Hydra, as the console
scripts do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from train_cli import RunsCode, run_command, shared_tiny_checkpoints

pytest.importorskip("attnlab.train", reason="attnlab.train is not in the tree yet")
pytestmark = pytest.mark.slow  # end to end: trains five tiny runs (about 1 s each), then runs the commands

RUNS = {
    "gpt": ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4"],
    "mlm": ["model=bert-tiny", "task=mlm", "data=text", "data.seq_len=16", "data.batch_size=4"],
    "classifier": [
        "model=bert-tiny",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.seq_len=48",
        "data.batch_size=8",
        "data.listops_max_depth=2",
    ],
    "seq2seq": [
        "model=seq2seq-tiny",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.batch_size=8",
    ],
    "vit": ["model=vit-tiny", "model.image_size=8", "model.patch_size=2", "data.batch_size=8"],
}
COMMON = [
    "trainer.max_steps=2",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=2",
]


@pytest.fixture(scope="module")
def checkpoint(built_once: Callable[..., Path]) -> Callable[[str], Path]:
    """``checkpoint(name)``: the last.ckpt of a tiny run of that default experiment, trained on first use,
    once per session for every worker (the commands write into folders of their own: out_dir)."""
    return shared_tiny_checkpoints(built_once, "sample_explain", RUNS, COMMON)


def write_digit(folder: Path) -> str:
    """An 8x8 grey image of seeded noise, ``folder / "digit.png"``: a ViT's input given as a file."""
    path = folder / "digit.png"
    Image.fromarray((np.random.default_rng(0).random((8, 8)) * 255).astype(np.uint8)).save(path)
    return str(path)


@pytest.fixture
def digit(tmp_path: Path) -> str:
    return write_digit(tmp_path)


# -- attnlab-sample --------------------------------------------------------------------------------


def test_sample_prints_continuations_of_each_prompt(checkpoint, monkeypatch, capsys) -> None:
    from attnlab.cli.sample import main

    args = [
        f"ckpt_path={checkpoint('gpt')}",
        "prompts=[To be,not]",
        "num_samples=2",
        "max_new_tokens=5",
        "seed=1",
    ]
    assert run_command(main, args, monkeypatch, capsys) == 0
    out = capsys.readouterr().out
    assert out.count("--- prompt") == 4
    assert "--- prompt 1, sample 1 ---\nnot" in out
    assert run_command(main, args, monkeypatch, capsys) == 0
    assert capsys.readouterr().out == out  # the seed fixes the samples


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("seq2seq", ["prompt=march 3 2021", "num_beams=3", "n_best=2", "max_new_tokens=8"], "  -> "),
        ("mlm", ["prompt='import <mask>s'"], "  position 7: "),
        ("classifier", ["prompt='[MAX 2 3 ]'", "num_predictions=3"], "  class "),
    ],
)
def test_sample_serves_every_text_family(checkpoint, monkeypatch, capsys, name, args, expected) -> None:
    from attnlab.cli.sample import main

    assert run_command(main, [f"ckpt_path={checkpoint(name)}", *args], monkeypatch, capsys) == 0
    out = capsys.readouterr().out
    assert expected in out
    if name == "seq2seq":
        assert out.count("  -> ") == 2
    if name == "classifier":
        assert out.count("  class ") == 3


def test_sample_classifies_images_with_a_vit(checkpoint, digit, monkeypatch, capsys) -> None:
    from attnlab.cli.sample import main

    assert run_command(main, [f"ckpt_path={checkpoint('vit')}", f"image={digit}"], monkeypatch, capsys) == 0
    lines = capsys.readouterr().out.splitlines()
    probs = [float(line.rsplit(": ", 1)[1]) for line in lines[1:]]
    assert lines[0] == digit and len(probs) == 5 and probs == sorted(probs, reverse=True)


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("gpt", ["ckpt_path=/no/such.ckpt"], "error: checkpoint '/no/such.ckpt' does not exist"),
        ("gpt", ["top_p=2"], "error: top_p=2.0 must be in (0, 1]"),
        ("gpt", ["stop=[ab]"], "error: stop=[ab]: 'ab' is 2 tokens; each stop string must be one token"),
        ("gpt", ["temperature=hot"], "error: temperature=hot: "),
        ("gpt", ["temperature=nan"], "error: temperature=nan: must be a finite number"),
        ("gpt", ["num_beams=0"], "error: num_beams=0: must be at least 1"),
        (
            "gpt",
            [f"ckpt_path={Path.cwd()}"],
            f"error: checkpoint '{Path.cwd()}' is a directory: give its .ckpt",
        ),
        ("mlm", ["prompt=no mask"], "error: prompt=no mask: a masked-LM checkpoint fills '<mask>'"),
        ("vit", [], "error: image=null: a ViT checkpoint classifies images"),
        ("seq2seq", [], "error: prompt='': a seq2seq checkpoint needs a source text"),
        (
            "gpt",
            ["image=x.png"],
            "error: image=x.png: a gpt checkpoint reads text: give prompt=... (or prompts=[...])",
        ),
        (
            "vit",
            ["prompt=a cat"],
            "error: prompt=a cat: a vit checkpoint reads images: give image=<file> (or images=[...])",
        ),
    ],
)
def test_sample_bad_input_is_one_line(checkpoint, monkeypatch, capsys, name, args, message) -> None:
    from attnlab.cli.sample import main

    ckpt = [] if any(a.startswith("ckpt_path=") for a in args) else [f"ckpt_path={checkpoint(name)}"]
    assert run_command(main, [*ckpt, *args], monkeypatch, capsys) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(message)
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize("command", ["sample", "explain"])
def test_sample_and_explain_refuse_a_checkpoint_that_would_run_code(
    tmp_path, monkeypatch, capsys, command
) -> None:
    """One line that never repeats torch's advice to load it with weights_only=False."""
    import importlib

    import torch

    main = importlib.import_module(f"attnlab.cli.{command}").main
    path, marker = tmp_path / "evil.ckpt", tmp_path / "ran"
    torch.save({"state_dict": RunsCode(marker)}, path)
    args = [
        f"ckpt_path={path}",
        *(["input=hi", f"out_dir={tmp_path / 'out'}"] if command == "explain" else []),
    ]
    assert run_command(main, args, monkeypatch, capsys) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: '{path}' is not a checkpoint of attnlab: it holds pickled objects beyond tensors and plain "
        "data, which could run code, so it is not loaded"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.ckpt"]  # nothing ran, nothing written


# -- attnlab-explain -------------------------------------------------------------------------------

PROBED = {  # run: (probed property, an ablated head or site)
    "gpt": ("token", "layers.1.attn_heads.0"),
    "mlm": ("token", "layers.0.attn_heads.1"),
    "classifier": ("class", "layers.1.ffn_out"),
    "seq2seq": ("token", "decoder.layers.0.cross_attn_heads.1"),
    "vit": ("class", "layers.1.attn_heads.0"),
}
LENS_AND_PATCHING = ["logit_lens=true", "corrupted=To go", "answer=e", "wrong=o"]  # of the gpt run
EXPLAIN_INPUTS = {  # run: (its input, the pictures of its attention and attribution, of what else it adds)
    "gpt": (
        "input=To be",
        ["attention/layer_1_self.png", "rollout.png", "tokens.png"],
        ["logit_lens.png", "patching_heads.png", "patching_resid.png"],
    ),
    "mlm": (
        "input='import <mask>s'",
        ["attention/layer_1_self.png", "rollout.png", "tokens.png"],
        [],
    ),
    "classifier": (
        "input='[MAX 2 3 ]'",
        ["attention/layer_1_self.png", "rollout.png", "tokens.png"],
        [],
    ),
    "seq2seq": (
        "input=march 3 2021",
        [
            "attention/decoder_layer_0_cross.png",
            "attention/decoder_layer_0_self.png",
            "attention/encoder_layer_0_self.png",
            "rollout.png",
            "tokens.png",
        ],
        [],
    ),
    "vit": (None, ["attention/layer_1_self.png", "image.png"], []),
}


@pytest.fixture
def explained(checkpoint, built_once, monkeypatch, capsys) -> Callable[[str], tuple[Path, str]]:
    """``explained(name)``: the folder of one attnlab-explain run of ``checkpoint(name)`` (its page in
    ``out/``) and what the command printed, run once per session for every worker. One run per family
    draws everything the tests of its page read (head importance, probes and an ablation; for gpt the
    logit lens and activation patching too): each picture costs a matplotlib draw, and the sections
    are computed independently of each other."""

    def run(name: str, folder: Path) -> None:
        from attnlab.cli.explain import main

        given, _, _ = EXPLAIN_INPUTS[name]
        prop, target = PROBED[name]
        args = [
            f"ckpt_path={checkpoint(name)}",
            given or f"input={write_digit(folder)}",
            f"out_dir={folder / 'out'}",
            "importance_batches=2",
            "max_new_tokens=10",
            "layers=[-1]",  # the last layer of each stack: fewer pictures to draw
            *[f"probe={prop}", f"ablate=[{target}]", "ablation=mean", "data_batches=2"],
            *(LENS_AND_PATCHING if name == "gpt" else []),
        ]
        assert run_command(main, args, monkeypatch, capsys) == 0, capsys.readouterr().err
        (folder / "printed.txt").write_text(capsys.readouterr().out, encoding="utf-8")

    def get(name: str) -> tuple[Path, str]:
        folder = built_once(f"sample_explain-explained-{name}", lambda folder: run(name, folder))
        return folder, (folder / "printed.txt").read_text(encoding="utf-8")

    return get


@pytest.mark.parametrize("name", list(EXPLAIN_INPUTS))
def test_explain_writes_pngs_and_an_index_page(explained, name) -> None:
    folder, printed = explained(name)
    _, pictures, added = EXPLAIN_INPUTS[name]
    page = Path(printed.strip().splitlines()[-1])
    assert page == folder / "out" / "index.html"
    pngs = sorted(str(p.relative_to(page.parent)) for p in page.parent.rglob("*.png"))
    assert pngs == sorted([*pictures, *added, "head_importance.png", "probes.png"])
    html = page.read_text(encoding="utf-8")
    assert all(f'src="{png}"' in html for png in pngs)
    assert "<h2>Prediction</h2>" in html and "<h2>Head importance (Michel et al. 2019)</h2>" in html


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["input=abc", "importance_batches=0"], "error: importance_batches=0: must be at least 1"),
        (
            ["input=abc", "heads=[5]"],
            "error: heads=[5]: the model has 2 heads: indices 0..1, or null for all",
        ),
        (["input=abc", "layerz=[0]"], "error: layerz=[0]: "),
        (["input=abc", "layers=[2]"], "error: layers=[2]: the model's stacks have 2 layers: indices -2..1"),
        (["input=abc", "ckpt_path=/no/such.ckpt"], "error: checkpoint '/no/such.ckpt' does not exist"),
    ],
)
def test_explain_bad_input_is_one_line(checkpoint, tmp_path, monkeypatch, capsys, args, message) -> None:
    from attnlab.cli.explain import main

    out_dir = tmp_path / "out"
    ckpt = [] if any(a.startswith("ckpt_path=") for a in args) else [f"ckpt_path={checkpoint('gpt')}"]
    cmd = [*ckpt, f"out_dir={out_dir}", "head_importance=false", *args]
    assert run_command(main, cmd, monkeypatch, capsys) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(message)
    assert not out_dir.exists()  # a command that failed leaves nothing behind


def test_explain_takes_an_image_of_the_runs_digits_test_split(
    checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    """``input=digits:<index>`` needs no image file: the README's example works on a fresh clone."""
    from attnlab.checkpoint import load_checkpoint, run_datamodule
    from attnlab.cli.explain import main

    args = [f"ckpt_path={checkpoint('vit')}", "input=digits:3", f"out_dir={tmp_path / 'out'}", "layers=[-1]"]
    assert run_command(main, [*args, "head_importance=false"], monkeypatch, capsys) == 0
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    label = run_datamodule(load_checkpoint(checkpoint("vit"))).datasets["test"].source.labels[3]
    assert f"), true class {label}; classes: class " in html
    assert (tmp_path / "out" / "image.png").is_file()


@pytest.fixture
def not_an_image(tmp_path: Path) -> str:
    path = tmp_path / "notes.png"
    path.write_text("not pixels", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("name", "given", "message"),
    [
        ("vit", "digits:100000", "error: input=digits:100000: the run's digits test split has "),
        ("vit", "digits:three", "error: input=digits:three: the run's digits test split has "),
        ("vit", "'To be'", "error: input=To be: a ViT checkpoint explains an image: give an image file"),
        ("vit", "{not_an_image}", "error: '{not_an_image}' is not an image file PIL can read"),
        ("vit", "no_such.png", "error: image file 'no_such.png' does not exist"),
        ("gpt", "digits:0", "error: input=digits:0: names an image, but this gpt checkpoint reads text"),
        ("classifier", "{not_an_image}", "error: input={not_an_image}: names an image, but this bert"),
    ],
)
def test_explain_input_of_the_wrong_kind_is_one_line(
    checkpoint, not_an_image, tmp_path, monkeypatch, capsys, name, given, message
) -> None:
    from attnlab.cli.explain import main

    out_dir = tmp_path / "out"
    given, message = given.format(not_an_image=not_an_image), message.format(not_an_image=not_an_image)
    cmd = [f"ckpt_path={checkpoint(name)}", f"input={given}", f"out_dir={out_dir}", "head_importance=false"]
    assert run_command(main, cmd, monkeypatch, capsys) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(message)
    assert not any("Traceback" in line for line in err)
    assert not out_dir.exists()  # nothing written


def test_sample_classifies_an_image_of_the_runs_digits_test_split(checkpoint, monkeypatch, capsys) -> None:
    from attnlab.cli.sample import main

    args = [f"ckpt_path={checkpoint('vit')}", "images=[digits:0,digits:15]", "num_predictions=2"]
    assert run_command(main, args, monkeypatch, capsys) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "digits:0" and lines[3] == "digits:15" and len(lines) == 6


@pytest.mark.slow
def test_sample_slides_past_a_learned_table_and_compiles_to_the_same_text(
    checkpoint, monkeypatch, capsys
) -> None:
    """gpt-tiny has learned positions (512): 530 new tokens run past its table and slide the context,
    with a note; compile=true decodes the same greedy text."""
    from attnlab.cli.sample import main

    args = [
        f"ckpt_path={checkpoint('gpt')}",
        "prompt=To be",
        "max_new_tokens=530",
        "temperature=0",
        "stop_at_eos=false",
    ]
    assert run_command(main, args, monkeypatch, capsys) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: past model.max_seq_len=") and "nanoGPT's sample.py" in out
    sample = out.split("---\n", 1)[1]
    assert len(sample.rstrip("\n")) >= len("To be") + 530  # every character came (a char tokenizer)
    assert run_command(main, [*args, "compile=true"], monkeypatch, capsys) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize(
    ("pos", "longest", "max_context", "expected", "note"),
    [
        ("learned", 100, None, None, ""),  # inside the trained length: nothing to say
        ("learned", 300, None, 256, "each token is predicted from the last 256 tokens"),
        (
            "rope",
            300,
            None,
            None,
            "past model.max_seq_len=256, the length the model was trained on (pos=rope)",
        ),
        ("rope", 300, 128, 128, "each token past 128 is predicted from the last 128"),
    ],
)
def test_sampling_past_the_trained_length_is_said(pos, longest, max_context, expected, note) -> None:
    from attnlab.run.families import context_for
    from attnlab.schema.model import GPTConfig
    from attnlab.schema.pos import pos_config

    cfg = GPTConfig(vocab_size=65, max_seq_len=256, pos=pos_config(pos))
    context, said = context_for(cfg, longest, max_context)
    assert context == expected and note in said and bool(said) == bool(note)


def test_explain_draws_the_logit_lens_and_refuses_it_for_a_vit(
    checkpoint, explained, digit, tmp_path, monkeypatch, capsys
) -> None:
    from attnlab.cli.explain import main

    out = explained("gpt")[0] / "out"  # asked with logit_lens=true
    html = (out / "index.html").read_text(encoding="utf-8")
    assert (
        (out / "logit_lens.png").exists() and 'src="logit_lens.png"' in html and "<h2>Logit lens</h2>" in html
    )
    vit = [
        f"ckpt_path={checkpoint('vit')}",
        f"input={digit}",
        f"out_dir={tmp_path / 'vit'}",
        "logit_lens=true",
    ]
    assert run_command(main, vit, monkeypatch, capsys) == 2
    message = "error: logit_lens=true: ViT predicts classes on this batch, not tokens"
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "vit").exists()


def test_explain_patches_a_corrupted_input_and_refuses_one_of_another_length(
    checkpoint, explained, tmp_path, monkeypatch, capsys
) -> None:
    from attnlab.cli.explain import main

    html = (explained("gpt")[0] / "out" / "index.html").read_text(encoding="utf-8")  # corrupted=To go
    assert 'src="patching_resid.png"' in html and 'src="patching_heads.png"' in html
    assert "<h2>Activation patching</h2>" in html and "layers.0.resid_pre</td><td>" in html
    args = [f"ckpt_path={checkpoint('gpt')}", "input=To be", "head_importance=false", "answer=e", "wrong=o"]
    bad = [*args, f"out_dir={tmp_path / 'bad'}", "corrupted=To gone"]
    assert run_command(main, bad, monkeypatch, capsys) == 2
    message = "error: corrupted=To gone: its input_ids have shape (1, 7), the input's (1, 5): patching needs"
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "bad").exists()  # refused before out_dir is made (test_explain_checked_first)
    unset = [
        f"ckpt_path={checkpoint('gpt')}",
        "input=To be",
        "corrupted=To go",
        f"out_dir={tmp_path / 'unset'}",
    ]
    assert run_command(main, unset, monkeypatch, capsys) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .startswith("error: corrupted=To go: patching needs answer= and wrong= (its metric)")
    )


@pytest.mark.parametrize("name", list(PROBED))
def test_explain_probes_and_ablates_every_family(explained, name: str) -> None:
    out = explained(name)[0] / "out"
    target = PROBED[name][1]
    html = (out / "index.html").read_text(encoding="utf-8")
    assert 'src="probes.png"' in html and "<h2>Linear probes</h2>" in html and (out / "probes.png").exists()
    assert "<h2>Ablation (mean)</h2>" in html and f"<td>{target}</td>" in html
    rows = (out / "ablation.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "ablated,loss,change" and rows[2].startswith(f"{target},")


@pytest.mark.parametrize(
    ("name", "given", "extra", "message"),
    [
        (
            "vit",
            "digits:0",
            "probe=token",
            "error: probe=token: ViT reads no tokens ('input_ids'): probe=class",
        ),
        (
            "gpt",
            "To be",
            "probe=class",
            "error: probe=class: DecoderLM's batches carry no class labels: probe=token",
        ),
        ("gpt", "To be", "probe=colour", "error: probe=colour: token (the current token) or class"),
        (
            "gpt",
            "To be",
            "ablate=[layers.0.attn_heads.9]",
            "error: ablate=layers.0.attn_heads.9: layers.0.attn_heads has 2 heads, layers.0.attn_heads.0 to layers.0.attn_heads.1",
        ),
        ("gpt", "To be", "ablation=half", "error: ablation=half: zero or mean"),
    ],
)
def test_explain_refuses_a_probe_or_ablation_it_cannot_do(
    checkpoint, tmp_path, monkeypatch, capsys, name: str, given: str, extra: str, message: str
) -> None:
    from attnlab.cli.explain import main

    out = tmp_path / "out"
    args = [
        f"ckpt_path={checkpoint(name)}",
        f"input={given}",
        f"out_dir={out}",
        "head_importance=false",
        extra,
    ]
    assert run_command(main, args, monkeypatch, capsys) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(message)
    assert not out.exists()
