"""The heads a pruned model keeps (``model.kept_heads``): their checks, and the key/value groups they
use under grouped-query attention (torch-free; ``attnlab.compress.prune`` writes them)."""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.schema.errors import ConfigError


def check_kept_heads(kept: list[list[int]], modules: int, n_heads: int, n_kv_heads: int | None) -> None:
    """``model.kept_heads``: one list per attention module, each at least one head (a module without
    heads would cut its layer's attention out), distinct increasing indices below n_heads, and whole
    key/value groups under grouped-query attention."""
    if len(kept) != modules:
        raise ConfigError("model.kept_heads", kept, f"needs one list per attention module: {modules} lists")
    for i, heads in enumerate(kept):
        key = f"model.kept_heads[{i}]"
        if not heads:
            raise ConfigError(key, heads, "keep at least one head in every attention module")
        if list(heads) != sorted(set(heads)) or heads[0] < 0 or heads[-1] >= n_heads:
            raise ConfigError(key, heads, f"distinct increasing head indices in 0..{n_heads - 1}")
        kept_kv_groups(heads, n_heads, n_kv_heads, key)


def kept_kv_groups(
    heads: Sequence[int], n_heads: int, n_kv_heads: int | None, key: str = "model.kept_heads"
) -> list[int]:
    """The key/value groups that query heads ``heads`` use: under grouped-query attention a group's
    key and value heads serve all its query heads, so heads are kept (or pruned) by whole groups."""
    size = n_heads // (n_kv_heads or n_heads)
    groups = sorted({h // size for h in heads})
    if len(heads) != size * len(groups):
        raise ConfigError(
            key,
            list(heads),
            f"keep whole key/value groups: with n_heads={n_heads} and n_kv_heads={n_kv_heads} "
            f"each group is {size} consecutive heads",
        )
    return groups
