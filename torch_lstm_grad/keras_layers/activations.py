"""Keras' activation functions by the names its configs store, as the Keras that wrote a file
computes them.

`activation(name, keras_major)` returns the function a layer's `activation="..."` applies. The
names are Keras' own; where two Keras majors compute different functions under one name, the
major decides: `hard_sigmoid` is Keras 2's `clip(0.2·x + 0.5, 0, 1)` and Keras 3's
`relu6(x + 3) / 6` (a Keras 2 model loaded into Keras 3 changes function; a port keeps the one
that trained it). Names a major does not define (Keras 2 has no `hard_silu`) raise, as that
Keras raises loading the file; tf_keras resolves `relu6`, `leaky_relu` and `log_softmax` from
`tf.nn`, with the same defaults as Keras 3's. Defaults are those of
the string form: `gelu` is exact (`approximate=False`) in both majors, `leaky_relu` Keras 3's
`negative_slope=0.2`, `softmax` / `log_softmax` over the last axis.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["ACTIVATIONS", "activation", "hard_sigmoid_keras2", "hard_sigmoid_keras3"]

# SELU's constants as TF's kernel writes them (tensorflow/core/kernels/relu_op_functor.h).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def hard_sigmoid_keras2(x: torch.Tensor) -> torch.Tensor:
    """Keras 2's `hard_sigmoid`: `clip(0.2·x + 0.5, 0, 1)` (tf_keras' `backend.hard_sigmoid`)."""
    return torch.clamp(x * 0.2 + 0.5, 0.0, 1.0)


def hard_sigmoid_keras3(x: torch.Tensor) -> torch.Tensor:
    """Keras 3's `hard_sigmoid`: `relu6(x + 3) / 6`."""
    return F.relu6(x + 3.0) / 6.0


def _selu(x):
    return _SELU_SCALE * torch.where(x > 0, x, _SELU_ALPHA * torch.expm1(x))


def _elu(x):
    return torch.where(x > 0, x, torch.expm1(x))


def _softsign(x):
    return x / (1.0 + x.abs())


def _gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


def _mish(x):
    return x * torch.tanh(F.softplus(x))


_COMMON = {
    "linear": lambda x: x,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "softplus": F.softplus,
    "softsign": _softsign,
    "elu": _elu,
    "selu": _selu,
    "gelu": _gelu,
    "swish": F.silu,
    "silu": F.silu,
    "exponential": torch.exp,
    "mish": _mish,
    # Keras 3's own; tf_keras finds them in tf.nn (leaky_relu's alpha 0.2 there too)
    "relu6": F.relu6,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "log_softmax": lambda x: torch.log_softmax(x, dim=-1),
}
ACTIVATIONS = {
    2: {**_COMMON, "hard_sigmoid": hard_sigmoid_keras2},
    3: {
        **_COMMON,
        "hard_sigmoid": hard_sigmoid_keras3,
        "hard_silu": lambda x: x * hard_sigmoid_keras3(x),
        "hard_swish": lambda x: x * hard_sigmoid_keras3(x),
    },
}


def activation(name: str | None, keras_major: int):
    """The function Keras `keras_major` applies for `activation=name` (None is linear)."""
    table = ACTIVATIONS.get(keras_major)
    if table is None:
        raise NotImplementedError(f"activations of Keras {keras_major} are not ported")
    fn = table.get("linear" if name is None else name)
    if fn is None:
        raise NotImplementedError(
            f"activation {name!r} is not one Keras {keras_major} defines by that name (ported: "
            f"{', '.join(sorted(table))})"
        )
    return fn
