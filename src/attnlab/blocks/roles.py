"""What each parameter of a model is, declared once where its module is built.

Weight decay, Muon's split, μP's initialisation and learning-rate multipliers, float8 eligibility,
FLOP counting, initialisation and the tensor-parallel plans all ask this table instead of guessing
from module types each in its own way. A module declares the roles of its own parameters with
``declare_roles(self, name=ParamRole.X, ...)`` right after creating them; a parameter its module does
not declare gets the default of its module's type (``default_role``): an ``nn.Linear``'s weight inside
a block is a hidden matrix and its bias a vector, an ``nn.Embedding``'s weight an embedding, every
one-dimensional tensor a vector. ``parameter_roles(model)`` reads the whole table, each shared (tied)
parameter once, under its first name (a tied output matrix is the token table: an embedding).

A module that sets a parameter's initial values itself (a learned position table, the ViT class
token) says so with ``declare_own_init(self, name, ...)``: the model's initialisation
(``models.common.init_weights``) then leaves them as built.
"""

from __future__ import annotations

from enum import Enum

from torch import nn


class ParamRole(str, Enum):
    """What a parameter is, in the words μP (Yang et al., Tensor Programs V, table 3) uses."""

    embedding = "embedding"  # token/segment embedding tables: input weights (width grows in one dimension)
    position_table = "position_table"  # learned absolute or relative position tables: input weights
    input_matrix = "input_matrix"  # a matrix from a fixed-size input into the width (ViT patch projection)
    hidden_matrix = "hidden_matrix"  # width x width matrices inside the blocks and the heads' dense layers
    readout = "readout"  # the output head's matrix (vocabulary or classes by width)
    vector = "vector"  # norm gains, biases, scalars and per-head vectors (sinks, gate biases, λ, decays)


ROLES_ATTRIBUTE = "param_roles"
OWN_INIT_ATTRIBUTE = "param_own_init"


def declare_roles(module: nn.Module, **roles: ParamRole) -> None:
    """Record the roles of ``module``'s own (direct) parameters by attribute name."""
    declared: dict[str, ParamRole] = dict(getattr(module, ROLES_ATTRIBUTE, {}))
    for name, role in roles.items():
        if not isinstance(role, ParamRole):
            raise TypeError(f"declare_roles({type(module).__name__}, {name}=...): a ParamRole, got {role!r}")
        declared[name] = role
    object.__setattr__(module, ROLES_ATTRIBUTE, declared)


def declare_own_init(module: nn.Module, *names: str) -> None:
    """Record that ``module`` initialised these (direct) parameters itself, so that the model's
    initialisation by role leaves them as they are."""
    own = set(getattr(module, OWN_INIT_ATTRIBUTE, ())) | set(names)
    object.__setattr__(module, OWN_INIT_ATTRIBUTE, frozenset(own))


def default_role(module: nn.Module, name: str, param: nn.Parameter) -> ParamRole:
    """The role of a parameter its module does not declare: embeddings' tables are embeddings,
    every tensor of one dimension (or none) a vector, any other matrix a hidden matrix."""
    if isinstance(module, nn.Embedding) and name == "weight":
        return ParamRole.embedding
    if param.dim() <= 1:
        return ParamRole.vector
    return ParamRole.hidden_matrix


def parameter_roles(model: nn.Module) -> dict[str, ParamRole]:
    """Every parameter of ``model`` by its full name (as ``named_parameters`` yields it, each shared
    parameter once) and its role. A role declared for a parameter a module does not hold is an error
    naming both, so a renamed parameter cannot silently fall back to its default."""
    roles: dict[str, ParamRole] = {}
    seen: set[int] = set()
    for prefix, module in model.named_modules():
        declared: dict[str, ParamRole] = getattr(module, ROLES_ATTRIBUTE, {})
        own = dict(module.named_parameters(recurse=False))
        check_held(module, prefix, set(declared), set(own))
        for name, param in own.items():
            if id(param) in seen:
                continue
            seen.add(id(param))
            role = declared.get(name) or default_role(module, name, param)
            roles[f"{prefix}.{name}" if prefix else name] = role
    return roles


def params_with_own_init(model: nn.Module) -> set[str]:
    """The full names of the parameters of ``model`` whose modules initialised them themselves
    (``declare_own_init``)."""
    names: set[str] = set()
    for prefix, module in model.named_modules():
        own_init: frozenset[str] = getattr(module, OWN_INIT_ATTRIBUTE, frozenset())
        check_held(
            module, prefix, set(own_init), {name for name, _ in module.named_parameters(recurse=False)}
        )
        names |= {f"{prefix}.{name}" if prefix else name for name in own_init}
    return names


def check_held(module: nn.Module, prefix: str, declared: set[str], held: set[str]) -> None:
    """A ValueError naming a declaration for a parameter ``module`` does not hold (an optional one set
    to None is fine): a renamed parameter must not silently fall back to its default."""
    unknown = sorted(name for name in declared - held if getattr(module, name, 0) is not None)
    if unknown:
        raise ValueError(
            f"{type(module).__name__} at {prefix or '<root>'} declares roles for {unknown}, "
            f"which it does not hold (it holds {sorted(held)})"
        )


def params_with_role(model: nn.Module, *wanted: ParamRole) -> list[nn.Parameter]:
    """The parameters of ``model`` whose role is one of ``wanted``, in ``named_parameters`` order."""
    roles = parameter_roles(model)
    return [p for name, p in model.named_parameters() if roles.get(name) in wanted]
