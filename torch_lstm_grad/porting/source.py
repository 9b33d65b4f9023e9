"""What a reader hands on: the file's variables under uniform names, and what the file itself
says about its writer and its layers (readers -> **source** -> layer descriptions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["KerasLayer", "Source", "Writer", "keras_version_tuple"]


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
    # saved graph: `keras_graph.py`), and why the layer could not be read (then config is {}).
    origins: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    # A layer read from a saved graph: its tensors there, for `verify` (keras_graph.py).
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
    graph: object | None = None  # tf1_graph.TF1Graph
    ignored: dict[str, str] = field(default_factory=dict)
    mask_layers: list[str] = field(default_factory=list)  # layers that produce masks
    signature: str | None = None  # a SavedModel's signature whose functions were read
