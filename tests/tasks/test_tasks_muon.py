"""``optim=muon``: which parameters Muon takes in each family, the composite optimizer against
``torch.optim.Muon`` and ``torch.optim.AdamW`` stepped separately, its state saved and restored,
one schedule over both learning rates, Lightning clipping and fitting with it in every family.
(Exact resume of a killed ``attnlab-train optim=muon`` run: tests/cli/test_train_muon.py.)"""

from __future__ import annotations

import copy
import io
import re
from types import SimpleNamespace

import pytest
import torch
from test_tasks_fit import FAMILY_TASKS, SIZES, LossRecorder, family_batch, trainer
from torch import nn
from torch.utils.data import DataLoader

from attnlab.blocks.heads import LMHead
from attnlab.checkpoint import load_task_from_checkpoint
from attnlab.data.tokenizers import SPECIAL_TOKENS, char_tokenizer
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import read_optim_config
from attnlab.schema.optim import MuonConfig
from attnlab.schema.pos import RelativePos
from attnlab.schema.task import task_config
from attnlab.tasks import build_task
from attnlab.tasks.muon import Muon, MuonWithAdamW, hidden_matrices, newton_schulz
from attnlab.tasks.optim import build_schedule, configure_optimizers, param_groups

FAMILY_SETUPS = [
    ("gpt", {}),  # the output head tied to the token embedding
    ("gpt", {"tie_embeddings": False, "norm": "rmsnorm", "lm_head_bias": True}),
    ("bert", {"type_vocab_size": 2, "num_classes": 3, "classifier_hidden": True}),
    ("seq2seq", {"pos": RelativePos()}),  # cross-attention; relative position bias tables
    ("vit", {"num_classes": 4}),  # a convolution as patch embedding, a class token
]
# Named independently of the rule in hidden_matrices: a 2-D weight of a projection or feed-forward
# layer inside a Transformer layer (stack.layers.3.self_attn.fn.qkv_proj.weight, ...ffn.fn.fc_in.weight),
# or a head's dense layer (BERT's masked-LM transform, the classifier's pooler): width x width too.
HIDDEN = re.compile(
    r"(stack|encoder|decoder)\.layers\.\d+\.(self_attn|cross_attn|ffn)\.fn\.\w+\.weight"
    r"|mlm_head\.dense\.weight|(cls_head|head)\.pre\.0\.weight"
)


def muon_cfg(**settings: object) -> MuonConfig:
    return MuonConfig(schedule="constant", warmup_steps=0, **settings)


@pytest.mark.parametrize(("family", "overrides"), FAMILY_SETUPS)
def test_muon_takes_the_hidden_matrices_and_adamw_everything_else(tiny_model, family, overrides):
    model = tiny_model(family, **overrides, **SIZES)
    optimizer = configure_optimizers(model, muon_cfg(), max_steps=10)["optimizer"]
    muon_ids = {id(p) for group in optimizer.muon.param_groups for p in group["params"]}
    adamw_ids = [id(p) for group in optimizer.adamw.param_groups for p in group["params"]]
    expected = {id(p) for name, p in model.named_parameters() if HIDDEN.fullmatch(name) and p.dim() == 2}
    assert muon_ids == expected and len(expected) >= 8  # 2 layers x (attention in, out, ffn in, out)
    assert len(set(adamw_ids)) == len(adamw_ids) and not muon_ids & set(adamw_ids)
    assert muon_ids | set(adamw_ids) == {id(p) for p in model.parameters()}
    for name, module in model.named_modules():
        if isinstance(module, (nn.Embedding, nn.Conv2d, LMHead)) or name.endswith("classifier"):  # readouts
            assert not {id(p) for p in module.parameters()} & muon_ids, name


def test_a_tied_output_matrix_goes_to_adamw(tiny_model):
    model = tiny_model("gpt", **SIZES)
    assert model.lm_head.weight is model.embed.tokens.weight
    optimizer = configure_optimizers(model, muon_cfg(), max_steps=10)["optimizer"]
    assert any(p is model.lm_head.weight for g in optimizer.adamw.param_groups for p in g["params"])
    # a linear layer of a Transformer layer sharing its matrix with an embedding is not hidden either
    model.stack.layers[0].ffn.fn.fc_in.weight = model.embed.tokens.weight = nn.Parameter(torch.randn(23, 16))
    assert all(p is not model.embed.tokens.weight for p in hidden_matrices(model))


def test_groups_learning_rates_and_weight_decay(tiny_model):
    model = tiny_model("vit", num_classes=4, **SIZES)
    cfg = muon_cfg(lr=0.05, weight_decay=0.02, momentum=0.9, nesterov=False, ns_steps=3)
    cfg.adamw.lr, cfg.adamw.weight_decay, cfg.adamw.betas = 3e-4, 0.05, [0.8, 0.95]
    optimizer = configure_optimizers(model, cfg, max_steps=10)["optimizer"]
    (muon,), (decay, no_decay) = optimizer.muon.param_groups, optimizer.adamw.param_groups
    assert optimizer.param_groups == [muon, decay, no_decay]  # the very dicts the two optimizers step
    assert (muon["lr"], muon["weight_decay"], muon["momentum"], muon["nesterov"], muon["ns_steps"]) == (
        0.05, 0.02, 0.9, False, 3
    )  # fmt: skip
    assert muon["adjust_lr_fn"] == "original"
    assert (decay["lr"], decay["weight_decay"], no_decay["weight_decay"]) == (3e-4, 0.05, 0.0)
    assert decay["betas"] == (0.8, 0.95) and decay["fused"]
    # AdamW decays the matrices Muon does not take: the patch convolution and the classifier
    assert {id(p) for p in decay["params"]} == {
        id(model.patches.proj.weight),
        id(model.head.classifier.weight),
    }


def gpt_loss(model: nn.Module, step: int) -> torch.Tensor:
    tokens = torch.randint(0, 23, (4, 12), generator=torch.Generator().manual_seed(step))
    logits = model.logits({"input_ids": tokens})
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 23), tokens[:, 1:].reshape(-1))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> None:
    model.train()
    for step in steps:
        optimizer.zero_grad()
        gpt_loss(model, step).backward()
        optimizer.step()


def test_one_step_equals_muon_and_adamw_stepped_separately(tiny_model):
    cfg = muon_cfg(lr=0.05, weight_decay=0.02, ns_dtype="bfloat16")  # torch.optim.Muon's dtype
    model = tiny_model("gpt", tie_embeddings=False, **SIZES)
    reference = copy.deepcopy(model)
    train(model, configure_optimizers(model, cfg, max_steps=10)["optimizer"], range(3))

    muon = torch.optim.Muon(hidden_matrices(reference), lr=0.05, weight_decay=0.02, momentum=0.95)
    rest = param_groups(reference, 0.1, exclude=hidden_matrices(reference))
    adamw = torch.optim.AdamW(rest, lr=1e-3, betas=(0.9, 0.99), eps=1e-8, fused=True)
    reference.train()
    for step in range(3):
        muon.zero_grad(), adamw.zero_grad()
        gpt_loss(reference, step).backward()
        muon.step(), adamw.step()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(got, want), name
    assert not torch.equal(
        model.stack.layers[0].ffn.fn.fc_in.weight,
        tiny_model("gpt", **SIZES).stack.layers[0].ffn.fn.fc_in.weight,
    )


def test_saved_state_resumes_exactly(tiny_model):
    """Two steps, state_dict through torch.save and a weights-only load into a fresh optimizer over a
    copy of the model, two more steps: the same parameters as four steps without the round trip."""
    model = tiny_model("gpt", **SIZES)
    optimizer = configure_optimizers(model, muon_cfg(), max_steps=10)["optimizer"]
    train(model, optimizer, range(2))
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    resumed_model = copy.deepcopy(model)
    resumed = configure_optimizers(resumed_model, muon_cfg(), max_steps=10)["optimizer"]
    resumed.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    assert resumed.muon.state is resumed.adamw.state is resumed.state
    assert resumed.muon.param_groups[0] is resumed.param_groups[0]
    first = hidden_matrices(resumed_model)[0]
    assert torch.equal(
        resumed.state[first]["momentum_buffer"], optimizer.state[hidden_matrices(model)[0]]["momentum_buffer"]
    )
    train(model, optimizer, range(2, 4))
    train(resumed_model, resumed, range(2, 4))
    for (name, got), want in zip(resumed_model.named_parameters(), model.parameters()):
        assert torch.equal(got, want), name


def test_the_schedule_scales_both_learning_rates_alike(tiny_model):
    cfg = MuonConfig(lr=0.02, schedule="cosine", warmup_steps=3, min_lr_ratio=0.1)
    model = tiny_model("gpt", **SIZES)
    out = configure_optimizers(model, cfg, max_steps=10)
    optimizer, scheduler = out["optimizer"], out["lr_scheduler"]["scheduler"]
    schedule = build_schedule(cfg, 10, model.cfg.d_model)
    for step in range(10):
        muon_lr, adamw_lr = optimizer.muon.param_groups[0]["lr"], optimizer.adamw.param_groups[0]["lr"]
        assert muon_lr == pytest.approx(0.02 * schedule(step)) and adamw_lr == pytest.approx(
            1e-3 * schedule(step)
        )
        optimizer.step()
        scheduler.step()


def test_lightning_fits_with_it_and_clips_every_parameter(tiny_model, monkeypatch):
    from attnlab.tasks import base

    clipped: list[set[int]] = []
    clip = base.clip_gradients  # the task's clipping by norm (one norm over all groups and meshes)

    def recording_clip(parameters, *args, **kwargs):
        parameters = list(parameters)
        clipped.append({id(p) for p in parameters})
        return clip(parameters, *args, **kwargs)

    monkeypatch.setattr(base, "clip_gradients", recording_clip)
    model = tiny_model("gpt", **SIZES)
    cfg = muon_cfg(lr=0.05)
    cfg.adamw.lr = 1e-2
    task = build_task(task_config("causal_lm"), cfg, model, max_steps=20)
    starts = torch.randint(0, 23, (64, 1), generator=torch.Generator().manual_seed(0))
    counting = (starts + torch.arange(13)) % 23  # the next token is always the successor
    data = [{"input_ids": s[:-1], "labels": s[1:]} for s in counting]
    recorder = LossRecorder()
    fit = trainer(20, [recorder], gradient_clip_val=0.5, limit_val_batches=0)
    fit.fit(task, DataLoader(data, batch_size=8, shuffle=True))
    assert len(recorder.losses) == 20 and sum(recorder.losses[-5:]) < 0.5 * sum(recorder.losses[:5])
    assert isinstance(fit.optimizers[0], MuonWithAdamW)
    assert len(clipped) == 20 and all(ids == {id(p) for p in model.parameters()} for ids in clipped)


COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's (Keller Jordan's)


def muon_pair(nesterov: bool, adjust_lr_fn: str, ns_dtype: torch.dtype | None):
    """Three matrices (tall, wide, square) and an identical copy; attnlab's Muon on the first, torch's
    on the copy."""
    shapes = [(24, 8), (8, 40), (16, 16)]
    generator = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(*shape, generator=generator)) for shape in shapes]
    twins = [nn.Parameter(p.detach().clone()) for p in params]
    settings = dict(lr=0.02, weight_decay=0.01, momentum=0.95, nesterov=nesterov, adjust_lr_fn=adjust_lr_fn)
    return params, Muon(params, ns_dtype=ns_dtype, **settings), twins, torch.optim.Muon(twins, **settings)


def step_both(params, optimizer, twins, reference, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for p, twin in zip(params, twins):
        p.grad = torch.randn(p.shape, generator=generator)
        twin.grad = p.grad.clone()
    optimizer.step()
    reference.step()


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("adjust_lr_fn", ["original", "match_rms_adamw"])
def test_in_bfloat16_it_is_torchs_muon_bit_for_bit(nesterov, adjust_lr_fn):
    params, optimizer, twins, reference = muon_pair(nesterov, adjust_lr_fn, torch.bfloat16)
    for seed in range(4):
        step_both(params, optimizer, twins, reference, seed)
    for p, twin in zip(params, twins):
        assert torch.equal(p, twin)
        assert torch.equal(optimizer.state[p]["momentum_buffer"], reference.state[twin]["momentum_buffer"])
    assert optimizer.state_dict()["param_groups"] == reference.state_dict()["param_groups"]  # one layout


@pytest.mark.parametrize("shape", [(24, 8), (8, 40), (64, 64)])
def test_in_float32_newton_schulz_matches_a_float64_reference(shape):
    update = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    want = newton_schulz(update.double(), COEFFICIENTS, 5, 1e-7, torch.float64)
    got = newton_schulz(update, COEFFICIENTS, 5, 1e-7, torch.float32)
    in_bf16 = newton_schulz(update, COEFFICIENTS, 5, 1e-7, torch.bfloat16)
    assert got.dtype == torch.float32 and got.shape == update.shape
    assert torch.allclose(got.double(), want, rtol=0, atol=1e-5)
    assert (in_bf16.double() - want).abs().max() > 100 * (got.double() - want).abs().max()
    # and it orthogonalises: singular values in Muon's band around 1 (about (0.7, 1.2) after 5 steps)
    singular = torch.linalg.svdvals(want)
    assert singular.min() > 0.5 and singular.max() < 1.5


def test_without_nesterov_the_momentum_buffer_is_not_orthogonalised_in_place():
    params, optimizer, twins, reference = muon_pair(False, "original", torch.float32)
    step_both(params, optimizer, twins, reference, seed=0)
    for p in params:  # from a zero buffer, one step leaves (1 - momentum) x grad
        assert torch.allclose(optimizer.state[p]["momentum_buffer"], 0.05 * p.grad, rtol=1e-6, atol=0)


def test_auto_computes_in_bfloat16_on_cuda_and_float32_elsewhere(tiny_model):
    optimizer = Muon([nn.Parameter(torch.zeros(4, 4))])
    assert optimizer.dtype_for(SimpleNamespace(device=torch.device("cuda", 0))) == torch.bfloat16
    assert optimizer.dtype_for(torch.zeros(2, 2)) == torch.float32
    model = tiny_model("gpt", **SIZES)
    for setting, want in [("auto", None), ("float32", torch.float32), ("bfloat16", torch.bfloat16)]:
        optimizer = configure_optimizers(model, muon_cfg(ns_dtype=setting), max_steps=10)["optimizer"]
        assert optimizer.muon.ns_dtype == want


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ns_dtype": "float16"}, "optim.ns_dtype=float16: choose one of auto, bfloat16, float32"),
        ({"momentum": 1.0}, "optim.momentum=1.0: must be in [0, 1)"),
        ({"ns_steps": 0}, "optim.ns_steps=0: must be in 1..99"),
        ({"ns_steps": 100}, "optim.ns_steps=100: must be in 1..99"),
        ({"adjust_lr": "keller"}, "optim.adjust_lr=keller: choose one of original, match_rms_adamw"),
        ({"adamw": {"lr": 0.0}}, "optim.adamw.lr=0.0: must be positive"),
        ({"adamw": {"betas": [0.9, 1.0]}}, "optim.adamw.betas=[0.9,1.0]: must be two numbers in [0, 1)"),
        ({"adamw": {"weight_decay": -1.0}}, "optim.adamw.weight_decay=-1.0: must be 0 or more"),
        ({"weight_decay": -0.1}, "optim.weight_decay=-0.1: must be 0 or more"),
    ],
)
def test_bad_muon_settings_name_the_key(settings, message):
    with pytest.raises(ConfigError) as err:
        read_optim_config({"name": "muon", **settings}).check()
    assert str(err.value) == message


@pytest.mark.parametrize(("family", "name", "overrides"), FAMILY_TASKS)
def test_each_family_trains_with_muon_and_its_checkpoint_loads(tmp_path, tiny_model, family, name, overrides):
    """A few steps on one batch (gradient clipping on, as attnlab-train's default) lower its loss; the
    checkpoint holds both optimizers' state and rebuilds the run's Muon config."""
    tokenizer = char_tokenizer(["abcdefghi"], roles=SPECIAL_TOKENS) if family != "vit" else None
    model = tiny_model(family, **overrides, **SIZES)
    task = build_task(task_config(name), muon_cfg(), model, tokenizer=tokenizer, max_steps=5)
    batch = family_batch(family)
    with torch.no_grad():
        before = task.training_loss(batch).item()
    fit = trainer(5, gradient_clip_val=1.0, limit_val_batches=0)
    fit.fit(task, DataLoader([batch] * 5, batch_size=None))
    with torch.no_grad():
        assert task.training_loss(batch).item() < before
    path = tmp_path / "run.ckpt"
    fit.save_checkpoint(path)
    (state,) = torch.load(path, weights_only=True)["optimizer_states"]
    muon, decay, no_decay = state["param_groups"]
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {"momentum_buffer"} == set(state["state"][muon["params"][0]])
    assert {"step", "exp_avg", "exp_avg_sq"} == set(state["state"][no_decay["params"][0]])
    assert load_task_from_checkpoint(path).optim_cfg == task.optim_cfg


@pytest.mark.parametrize("shape", [(24, 40), (40, 24)], ids=["tall", "wide"])
def test_newton_schulz_in_bfloat16_is_torchs_private_one(shape: tuple[int, int]) -> None:
    """``tasks.muon.newton_schulz`` copies ``torch.optim._muon._zeropower_via_newtonschulz`` to choose
    its dtype (torch's always casts to bfloat16): in bfloat16 the two agree bit for bit."""
    from torch.optim._muon import _zeropower_via_newtonschulz

    update = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    coefficients, steps, eps = (3.4445, -4.7750, 2.0315), 5, 1e-7
    theirs = _zeropower_via_newtonschulz(update, coefficients, steps, eps)
    ours = newton_schulz(update, coefficients, steps, eps, torch.bfloat16)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    assert torch.equal(ours, theirs)
