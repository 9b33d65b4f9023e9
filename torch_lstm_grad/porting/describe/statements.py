"""What the user states about a file that the file does not store: `--set [LAYER:]KEY=VALUE`,
`--keras-version`, `--assume-defaults` (the `convert` command's flags, also `convert()`'s
arguments). The describers use them only where the file is silent or ambiguous; every value
so taken is printed with the origin "--set" / "--keras-version" / "--assume-defaults"."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Statements", "parse_set", "parse_value"]


def parse_value(text: str):
    """A `--set` value: JSON where it parses (numbers, true/false, null, strings in quotes),
    else the bare string ("hard_sigmoid"); "none" and "None" mean None."""
    if text in ("none", "None"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_set(item: str) -> tuple[str | None, str, object]:
    """`[LAYER:]KEY=VALUE` -> `(layer or None for every layer, key, value)`."""
    if "=" not in item:
        raise ValueError(f"--set {item!r}: expected [LAYER:]KEY=VALUE")
    target, _, value = item.partition("=")
    layer, sep, key = target.rpartition(":")
    key = key.strip()
    if not key:
        raise ValueError(f"--set {item!r}: no KEY before '='")
    return (layer.strip() if sep else None), key, parse_value(value.strip())


@dataclass
class Statements:
    """`settings[(layer or None, key)] = value`; `keras_version`: the Keras that wrote a file
    that does not say (or overrides a version the file gives ambiguously, e.g. "2.2.4-tf");
    `assume_defaults`: take the class defaults (TF1 cells, Keras layers of an unknown version)
    for everything a file does not store."""

    settings: dict[tuple[str | None, str], object] = field(default_factory=dict)
    keras_version: str | None = None
    assume_defaults: bool = False
    used: set = field(default_factory=set)

    @classmethod
    def from_args(cls, sets=(), keras_version=None, assume_defaults=False, forget_bias=None):
        settings, said = {}, {}

        def state(layer, key, value, how: str) -> None:
            # Two values for one key would leave one unused without a word: refused instead.
            if (layer, key) in settings and settings[(layer, key)] != value:
                raise ValueError(
                    f"{said[(layer, key)]} and {how}: two values for "
                    f"{layer + ':' if layer else ''}{key}"
                )
            settings[(layer, key)], said[(layer, key)] = value, how

        for item in sets:
            layer, key, value = parse_set(item) if isinstance(item, str) else item
            state(layer, key, value, f"--set {item}" if isinstance(item, str) else f"--set {key}")
        if forget_bias is not None:
            state(None, "forget_bias", float(forget_bias), f"--forget-bias {forget_bias}")
        return cls(settings, keras_version, assume_defaults)

    def take(self, layer_names, key: str):
        """`(found, value)` for `key` of the layer known by any of `layer_names` (most specific
        first), else of every layer; what is found is recorded as used."""
        for name in [*layer_names, None]:
            if (name, key) in self.settings:
                self.used.add((name, key))
                return True, self.settings[(name, key)]
        return False, None

    def unused(self) -> list[str]:
        """The statements no layer took (a typo, or a value the file stores)."""
        return [
            f"{layer + ':' if layer else ''}{key}"
            for (layer, key) in self.settings
            if (layer, key) not in self.used
        ]
