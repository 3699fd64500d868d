"""``model.init_from``: a run's model config completed from a local Hugging Face checkpoint."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from attnlab.schema.checks import check_run
from attnlab.schema.errors import ConfigError, show
from attnlab.schema.load import plain
from attnlab.schema.run import RunConfig

# Fields a run may set freely on top of a pretrained checkpoint (model.init_from): regularisation and heads.
FREE_MODEL_FIELDS = (
    "dropout",
    "attn_dropout",
    "ffn_dropout",
    "num_classes",
    "mlm_head",
    "pooling",
    "classifier_hidden",
    "init_from",
    "init_std",
)


def resolve_init_from(run: RunConfig, explicit: Iterable[str] = ()) -> RunConfig:
    """With ``model.init_from``: the model config of that Hugging Face checkpoint (family and sizes),
    plus the free fields the run set. ``explicit`` names the model fields the user chose (``family``
    for ``model=<preset>``); one that contradicts the checkpoint is a ConfigError.
    """
    path = run.model.init_from
    if not path:
        return run
    from attnlab.models.hf import check_hf_checkpoint  # needs torch: only when init_from is used

    try:  # its config.json, and its weights' names and shapes against it (the files' headers only)
        pretrained = check_hf_checkpoint(path)
    except (OSError, ValueError) as err:
        raise ConfigError("model.init_from", path, str(err).splitlines()[0]) from None
    ours, theirs = _flat(plain(run.model)), _flat(plain(pretrained))
    for key in explicit:
        if key.split(".")[0] not in FREE_MODEL_FIELDS and key in theirs and ours[key] != theirs[key]:
            raise ConfigError(
                f"model.{key}",
                ours[key],
                f"contradicts the checkpoint model.init_from={path}, which has "
                f"{key}={show(theirs[key])}; leave it out to take the checkpoint's",
            )
    free = {k: getattr(run.model, k) for k in FREE_MODEL_FIELDS if k in explicit or k == "init_from"}
    run = replace(run, model=replace(pretrained, **free))
    check_run(run)
    return run


def _flat(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def explicit_model_keys(overrides: list[str]) -> set[str]:
    """The ModelConfig fields a user chose on the command line: ``model=X`` is ``family``,
    ``model.a.b=v`` is ``a.b``, ``pos=X`` is ``pos.name``.
    """
    keys = set()
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "model":
            keys.add("family")
        elif key == "pos":
            keys.add("pos.name")
        elif key.startswith("model."):
            keys.add(key[len("model.") :])
    return keys
