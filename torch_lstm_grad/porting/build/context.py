"""What every builder shares: the build's refusals and warnings, and the entry a built module
is saved as (`convert` writes entries; `load` rebuilds modules from them)."""

from __future__ import annotations

import numpy as np
import torch

from ..describe.description import LayerDescription, Refusal

__all__ = ["BuildContext", "make_entry", "tensor"]


def tensor(v) -> torch.Tensor:
    """A file's array as a tensor of its own (the file's buffer is not shared)."""
    return torch.from_numpy(np.array(v, copy=True))


class BuildContext:
    """The file's `variables` by uniform name, whether `--approximate` was given, and what the
    builders refused or approximated so far."""

    def __init__(self, variables, approximate: bool):
        self.variables, self.approximate = variables, approximate
        self.refusals: list[Refusal] = []
        self.warnings: list[str] = []

    def refuse(self, layer, attr, value, reason, approximation=None) -> bool:
        """Records a refusal; True when `--approximate` lets the build go on."""
        r = Refusal(layer, attr, value, reason, approximation)
        if self.approximate and approximation:
            self.warnings.append(f"approximate port: {r}")
            return True
        self.refusals.append(r)
        return False


def make_entry(module, kind: str, config: dict, d: LayerDescription, used: list[str]) -> dict:
    """The saved form of a built module: its kind and constructor config, its weights, the
    description it was built from, and the file's variables it holds."""
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    return {
        "kind": kind,
        "class": type(module).__name__,
        "config": config,
        "state_dict": state,
        "description": d.to_dict(),
        "used": used,
    }
