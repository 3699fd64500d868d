"""ViT (``ViTForImageClassification``, ``ViTModel``): a pre-norm encoder over image patches.

Its config and layers are BERT's, spelled the same way (``bert.bert_like_sizes``, ``bert.bert_layer``),
with the norms placed before each sublayer and a classifier on the class token.
"""

from __future__ import annotations

from attnlab.models.hf.bert import bert_layer, bert_like_export, bert_like_sizes, labels
from attnlab.models.hf.config_keys import num_labels, require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Raw, Table, layers
from attnlab.schema.model import ViTConfig
from attnlab.schema.pos import LearnedPos


def vit_config(c: dict, cls: str) -> ViTConfig:
    require(c, qkv_bias=True)
    image_size, patch_size = c["image_size"], c["patch_size"]
    if isinstance(image_size, list | tuple) or isinstance(patch_size, list | tuple):
        raise ValueError(f"image_size={image_size}, patch_size={patch_size}: attnlab's ViT takes square ints")
    return ViTConfig(
        **bert_like_sizes(c),
        norm_first=True,
        image_size=image_size,
        patch_size=patch_size,
        channels=c["num_channels"],
        num_classes=num_labels(c),
        pooling="cls",
        classifier_hidden=False,
        pos=LearnedPos(),
    )


def vit_export(cfg: ViTConfig) -> dict:
    """The config.json of ``cfg`` as a ViT image classifier (the inverse of ``vit_config``)."""
    return {
        "model_type": "vit",
        "architectures": ["ViTForImageClassification"],
        **bert_like_export(cfg),
        "image_size": cfg.image_size,
        "patch_size": cfg.patch_size,
        "num_channels": cfg.channels,
        "qkv_bias": True,
        **labels(cfg.num_classes),
    }


def vit_weights(cfg: ViTConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"encoder.layer.{i}."
        norms = {"self_attn.norm": p + "layernorm_before", "ffn.norm": p + "layernorm_after"}
        return {**bert_layer(i, "attention.attention"), **norms}

    return {
        "patches.proj": "embeddings.patch_embeddings.projection",
        "cls_token": Raw("embeddings.cls_token"),
        "pos.weight": Raw("embeddings.position_embeddings", squeeze=True),
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "layernorm",
        "head.classifier": "classifier",
    }


register(
    Architecture(
        model_type="vit",
        classes=("ViTForImageClassification", "ViTModel"),
        prefix="vit.",
        config=vit_config,
        weights=vit_weights,
        ignore=(r"^pooler\.",),
        export=vit_export,
        family="vit",
    )
)
