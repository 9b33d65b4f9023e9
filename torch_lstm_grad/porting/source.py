"""What a reader hands on: the file's variables under uniform names, and what the file itself
says about its writer and its layers (readers -> **source** -> layer descriptions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "KerasLayer",
    "Source",
    "Writer",
    "keras_rnn_scopes",
    "keras_version_tuple",
    "layer_and_rest",
]

# The weights of a Keras recurrent cell, as Keras names its variables.
_RNN_WEIGHTS = ("kernel", "recurrent_kernel", "bias")


@dataclass(frozen=True)
class Writer:
    """Who wrote the file, as far as the file says.

    `family`: "keras" (a Keras layer file or checkpoint), "tf1" (TF1 variable names) or "tf2"
    (a TF2 object checkpoint that is not Keras'). `keras_version`: the version string the file
    stores (e.g. "2.2.0", "2.2.4-tf", "3.15.1"), or None. `keras_major`: 1/2/3 when known (from
    the version or from a format only that major writes), else None. `how`: where that came
    from, for the log."""

    family: str
    keras_version: str | None = None
    keras_major: int | None = None
    how: str = ""

    @property
    def label(self) -> str:
        """Short: "Keras 2.2.0", "Keras 3", "Keras (version not stored)"."""
        if self.family != "keras":
            return self.how or self.family
        if self.keras_version:
            return f"Keras {self.keras_version}"
        return f"Keras {self.keras_major}" if self.keras_major else "Keras (version not stored)"

    def describe(self) -> str:
        return f"{self.label} ({self.how})" if self.how and self.family == "keras" else self.label


def keras_version_tuple(version: str) -> tuple[int, int, int, bool]:
    """`(major, minor, patch, tf)` of a Keras version string ("2.2.4-tf" -> (2, 2, 4, True):
    tf.keras marked its versions with "-tf")."""
    m = re.match(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?", version.strip())
    if not m:
        raise ValueError(f"keras_version: cannot read version {version!r}")
    return (int(m[1]), int(m[2] or 0), int(m[3] or 0), version.strip().endswith("-tf"))


@dataclass
class KerasLayer:
    """One layer's entry in a Keras model config (`.keras` config.json, legacy `.h5`
    model_config, or a config the user supplies). `mask_from`: the layer or op whose mask the
    model passes to this layer's call when the config says so (Keras 3 records it), else None."""

    name: str
    class_name: str
    config: dict
    mask_from: str | None = None
    # Where a config key came from when not from a stored config (a layer read back from a
    # saved graph: `graphs/keras_loops.py`), and why the layer could not be read (then config is
    # {}).
    origins: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    # A layer read from a saved graph: its tensors there, for `verify` (graphs/keras_loops.py).
    graph_io: dict | None = None


@dataclass
class Source:
    """A file read: `variables` by uniform name (`<layer>/<cell>/<weight>` for Keras, TF1's own
    names, a TF2 variable's full name), `keys` the name each had in the file, `layers` the Keras
    layer configs the file (or `--config`) holds, `graph` a TF1 meta graph when one was found,
    `ignored` variables that are not weights (optimizer state, counters) with the reason."""

    path: str
    format: str
    writer: Writer
    variables: dict[str, np.ndarray]
    keys: dict[str, str] = field(default_factory=dict)
    layers: dict[str, KerasLayer] = field(default_factory=dict)
    config_origin: str = ""
    graph: object | None = None  # graphs.graph_def.Graph
    ignored: dict[str, str] = field(default_factory=dict)
    mask_layers: list[str] = field(default_factory=list)  # layers that produce masks
    signature: str | None = None  # a SavedModel's signature whose functions were read
    model_config: dict | None = None  # the Keras model config as stored (whole-model ports)
    # Keras files: each layer's variables (keys of `variables`) in the file's order, under the
    # layer's name (a `.keras` file's nested layers: its path of layer names), and each
    # variable's name as the file writes it, where that differs (`dense/kernel:0`).
    layer_weights: dict[str, list[str]] = field(default_factory=dict)
    stored_names: dict[str, str] = field(default_factory=dict)


# A cell's scope; Keras 3 puts an RNN's several cells under `stacked_rnn_cells`.
_CELL_NAME = re.compile(r"(?:(?:lstm|gru|simple_rnn)_cell|stacked_rnn_cells)(?:_\d+)?")


def layer_and_rest(scope: str) -> tuple[str, list[str]]:
    """`(layer, [sublayer/cell parts])` of a variable scope: the layer is the part before a
    Bidirectional's `forward_*`/`backward_*` or before the cell, so the names of the models
    around it (Keras 3 names variables `<model>/<layer>/<cell>/<weight>`) are not taken for
    the layer's."""
    parts = scope.split("/")
    for k in range(1, len(parts)):
        if parts[k].startswith(("forward_", "backward_")) or _CELL_NAME.fullmatch(parts[k]):
            return parts[k - 1], parts[k:]
    return parts[0], parts[1:]


def keras_rnn_scopes(variables: dict) -> dict[str, dict[str, str]]:
    """`scope -> weight -> variable name` for every scope holding a `recurrent_kernel` (a Keras
    recurrent cell)."""
    scopes: dict[str, dict[str, str]] = {}
    for name in variables:
        scope, _, leaf = name.rpartition("/")
        if leaf in _RNN_WEIGHTS and scope:
            scopes.setdefault(scope, {})[leaf] = name
    return {s: w for s, w in scopes.items() if "recurrent_kernel" in w}
