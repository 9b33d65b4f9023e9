"""The layer description: what one TF/Keras layer computed, attribute by attribute, each with
where its value came from (readers -> source -> **layer description** -> module builders).

A description is built from the file alone (a Keras config, a TF1 meta graph, the variables'
names and shapes), from the defaults of the writer the file names (e.g. Keras 2.2's
`recurrent_activation="hard_sigmoid"`), or from what the user stated (`--set`); the log prints
each attribute with its origin, and the converted file stores the description with the module,
so `load` can refuse a file whose description this version cannot honour.

Attribute names are this package's, one vocabulary for every source:

* units, input_size: U (H), I.
* gate_activation: on the gates (Keras `recurrent_activation`): sigmoid, hard_sigmoid_keras2
  (`clip(0.2x + 0.5, 0, 1)`), hard_sigmoid_keras3 (`relu6(x + 3) / 6`), or a name not computed.
* activation: on the candidate and the cell output (Keras `activation`): tanh, relu, linear, ...
* forget_bias: added to the forget gate at run time (TF1 cells; Keras keeps it in the bias).
* cell_clip, clip_gradient: the cell state's clip (None: none) and its gradient,
  "straight_through" (TF's block kernels) or "zero" (`clip_by_value`, TF1 `LSTMCell`).
* use_peepholes, num_proj, proj_clip: TF1 `LSTMCell`'s peepholes, projection and its clip.
* use_bias, reset_after, bias_layout, gate_order: how the weights are stored.
* go_backwards, return_sequences, return_state, stateful, time_major, zero_output_for_mask:
  Keras' call semantics.
* num_layers, direction, input_mode, merge_mode: cuDNN layers; Bidirectional's merge.
* dtype: the layer's compute dtype (a Keras dtype policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Attr", "LayerDescription", "Refused", "Refusal"]


@dataclass(frozen=True)
class Attr:
    """One attribute's value and where it came from. `stored`: read from the file (a config
    value, a graph constant, a shape); False for a writer's default or the user's statement."""

    value: object
    origin: str
    stored: bool = True

    def to_dict(self) -> dict:
        return {"value": self.value, "origin": self.origin, "stored": self.stored}

    @classmethod
    def from_dict(cls, d: dict) -> Attr:
        return cls(d["value"], d["origin"], d["stored"])


@dataclass
class LayerDescription:
    """One layer: `name` (its module's name in the converted file), `kind` (e.g. "keras.LSTM",
    "tf1.LSTMCell"), `where` (where the description was read), `attrs`, `weights` (role ->
    variable name in the file), `notes` (what the module does not carry, and why: training-time
    settings), `children` (a Bidirectional's "forward" and "backward")."""

    name: str
    kind: str
    where: str
    attrs: dict[str, Attr] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    children: dict[str, LayerDescription] = field(default_factory=dict)

    def value(self, key: str, default=None):
        a = self.attrs.get(key)
        return default if a is None else a.value

    def set(self, key: str, value, origin: str, stored: bool = True) -> None:
        self.attrs[key] = Attr(value, origin, stored)

    def lines(self, indent: str = "  ") -> list[str]:
        """The description as the convert log prints it."""
        out = [f"{self.name}: {self.kind} ({self.where})"]
        width = max((len(k) for k in self.attrs), default=0)
        for k, a in self.attrs.items():
            mark = "" if a.stored else "  [not stored in the file]"
            out.append(f"{indent}{k.ljust(width)} = {a.value!r}  <- {a.origin}{mark}")
        for note in self.notes:
            out.append(f"{indent}note: {note}")
        for role, child in self.children.items():
            out.append(f"{indent}{role}:")
            out.extend(indent * 2 + line for line in child.lines(indent))
        return out

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "where": self.where,
            "attrs": {k: a.to_dict() for k, a in self.attrs.items()},
            "weights": dict(self.weights),
            "notes": list(self.notes),
            "children": {k: c.to_dict() for k, c in self.children.items()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> LayerDescription:
        return cls(
            d["name"],
            d["kind"],
            d["where"],
            {k: Attr.from_dict(a) for k, a in d["attrs"].items()},
            dict(d["weights"]),
            list(d["notes"]),
            {k: cls.from_dict(c) for k, c in d["children"].items()},
        )


@dataclass(frozen=True)
class Refusal:
    """Something a port cannot reproduce exactly: the layer, the attribute and its value as the
    file states it, why, and what `--approximate` would build instead (None: nothing close)."""

    layer: str
    attribute: str
    value: object
    reason: str
    approximation: str | None = None

    def __str__(self) -> str:
        s = f"{self.layer}: {self.attribute} = {self.value!r}: {self.reason}"
        if self.approximation:
            s += f" (--approximate: {self.approximation})"
        return s


class Refused(ValueError):
    """Raised when a conversion would compute something other than what TF/Keras computed."""

    def __init__(self, refusals: list[Refusal]):
        self.refusals = list(refusals)
        super().__init__(
            "cannot reproduce exactly (nothing was written):\n  "
            + "\n  ".join(str(r) for r in self.refusals)
        )
