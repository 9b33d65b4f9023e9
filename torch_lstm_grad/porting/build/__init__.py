"""Layer descriptions -> modules (readers -> source -> layer description -> **module builders**).

Each builder turns one description into a module of this package that computes the same
function and the same gradients, copies the file's weights into it, and returns an *entry*:
`{"class", "config", "state_dict", "description", "used"}`, what `convert` saves and `load`
rebuilds. Where a description asks for something the modules do not compute, the builder
raises `Refused` naming the layer, the attribute and the value (`approximate=True` builds the
nearest module instead where one exists, and returns the difference as a warning).

The modules decide what they compute: a builder passes the description's values to the
module's constructor, which raises NotImplementedError for a variant its kernels lack; that
becomes a refusal. So `load` refuses the same descriptions on a version whose kernels lack them.
"""

from __future__ import annotations

import torch

from ..describe.description import Refused
from . import keras_rnn, tf1_cells
from .context import BuildContext

__all__ = ["build", "module_from_entry"]


def _builder(kind: str):
    return keras_rnn if kind.startswith("keras.") else tf1_cells


def build(descriptions, variables, approximate: bool = False):
    """`(entries by layer name, warnings)` for every description, or raises `Refused` listing
    every layer attribute that cannot be reproduced."""
    ctx = BuildContext(variables, approximate)
    entries = {}
    for d in descriptions:
        e = _builder(d.kind).build(ctx, d)
        if e is not None:
            entries[d.name.replace("/", ".")] = e
    if ctx.refusals:
        raise Refused(ctx.refusals)
    return entries, ctx.warnings


def module_from_entry(entry: dict) -> torch.nn.Module:
    """The module an entry of a converted file describes (`load`); raises ValueError naming the
    layer when this version cannot build it (a variant its kernels lack)."""
    dtype = next(iter(entry["state_dict"].values())).dtype
    module = _builder(entry["kind"]).module_from_entry(entry, dtype)
    module.load_state_dict(entry["state_dict"])
    return module
