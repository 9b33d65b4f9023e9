"""Test helper for the porting tests: models built and run by TF/Keras themselves, their files,
and the comparison of a port with them (outputs, final states, and the gradients of one loss
that uses all of them, with respect to the inputs and every weight).

Not a test module. Every weight and bias is randomised before saving (never an initializer's
zeros or ones), so a dropped bias or swapped gate block shows in the numbers.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from tf_oracle import tf_module

from torch_lstm_grad import keras_layers, modules

TOL = 1e-5  # scaled: max |ours - TF| / max(1, max |TF|), float32


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def randomize(weights, seed: int) -> None:
    """Uniform [-0.6, 0.6) into every Keras / TF variable (biases included)."""
    r = rng(seed)
    for w in weights:
        w.assign(r.uniform(-0.6, 0.6, tuple(w.shape)).astype(np.float32))


def loss_weights(arrays, seed: int) -> list[np.ndarray]:
    r = rng(seed)
    return [r.standard_normal(np.shape(a)).astype(np.float32) for a in arrays]


def scaled_error(ours, theirs) -> float:
    ours = ours.detach().cpu().numpy() if torch.is_tensor(ours) else np.asarray(ours)
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape, f"shape {ours.shape} vs TF's {theirs.shape}"
    if theirs.size == 0:
        return 0.0
    return float(np.abs(ours - theirs).max() / max(1.0, float(np.abs(theirs).max())))


def assert_close(named: dict, tol: float = TOL) -> None:
    """`named[name] = (ours, theirs)`: every pair within `tol` scaled; the message lists all."""
    errs = {k: scaled_error(a, b) for k, (a, b) in named.items()}
    bad = {k: f"{e:.2e}" for k, e in errs.items() if not e <= tol}
    assert not bad, (
        f"scaled errors above {tol}: {bad} (all: "
        + ", ".join(f"{k} {e:.1e}" for k, e in errs.items())
        + ")"
    )


# tf_keras 2.21's files and the numbers tf_keras computed from them (make_fixtures.py there)
KERAS2 = os.path.join(os.path.dirname(__file__), "data", "keras2")
_KERAS2_NUMBERS = {"savedmodel": "expected_saved_model.npz",
                   "subclassed": "expected_subclassed.npz"}  # fmt: skip


def stored_keras2(prefix: str) -> dict:
    """The arrays make_fixtures.py stored for the model `prefix` (x, mask, outK, rK, dx, d/...)."""
    data = np.load(os.path.join(KERAS2, _KERAS2_NUMBERS.get(prefix, "expected.npz")))
    return {k[len(prefix) + 1 :]: data[k] for k in data.files if k.startswith(prefix + "/")}


def _keras_param(mods, path):
    parts = path.split("/")
    module = mods[parts[0]]
    if isinstance(module, keras_layers.KerasBidirectional):
        module = module.forward_layer if parts[1].startswith("forward_") else module.backward_layer
    return getattr(module, parts[-1])


def compare_with_stored_keras2(mods, prefix, names, mask: bool, last_only: bool = False,
                               device: str = "cpu", train: bool = True) -> None:  # fmt: skip
    """The ported modules `names`, chained on tf_keras' stored input, against tf_keras' stored
    outputs and the gradients of Σ out_k·r_k (input and every weight) on `device`; `last_only`:
    the model's output is the last layer's (a Sequential model). `train=False`: outputs only,
    under no_grad (the inference ops)."""
    e = stored_keras2(prefix)
    x = torch.from_numpy(e["x"]).to(device).requires_grad_(train)
    m = torch.from_numpy(e["mask"]).to(device) if mask else None
    outs, y = [], x
    with torch.set_grad_enabled(train):
        for name in names:
            out = flat(mods[name](y, mask=m))
            outs += out
            y = out[0]
    outs = outs[-1:] if last_only else outs
    assert f"out{len(outs)}" not in e
    pairs = {f"output {k}": (o, e[f"out{k}"]) for k, o in enumerate(outs)}
    if train:
        rs = [torch.from_numpy(e[f"r{k}"]).to(device) for k in range(len(outs))]
        grads_want = {k[2:]: v for k, v in e.items() if k.startswith("d/")}
        params = {p: _keras_param(mods, p) for p in grads_want}
        loss = sum((o * r).sum() for o, r in zip(outs, rs, strict=True))
        grads = torch.autograd.grad(loss, [x, *params.values()])
        pairs["d x"] = (grads[0], e["dx"])
        pairs |= {f"d {p}": (g, grads_want[p]) for p, g in zip(params, grads[1:], strict=True)}
    assert_close(pairs)


def step_cells(cells, x_t, lengths, initial=None):
    """dynamic_rnn (time-major `x_t` [T, B, I]) over a MultiRNNCell of LSTMBlockCell /
    GRUBlockCell steps, on `x_t`'s device: each step runs the cells in turn on the one below's
    output; past a row's length (`lengths`, a NumPy array, or None) every state is carried and
    the output is zero. Returns (outputs, the states flattened as tf.nest does: (c, h) per LSTM,
    h per GRU); `initial`: that flat list (default zeros)."""
    T, B = x_t.shape[:2]
    states, flat_initial = [], list(initial) if initial is not None else None
    for cell in cells:
        lstm = isinstance(cell, modules.LSTMBlockCell)
        h_width = getattr(cell, "num_proj", None) or cell.num_units
        widths = [cell.num_units, h_width] if lstm else [cell.num_units]
        if flat_initial is None:
            states.append(tuple(x_t.new_zeros(B, w) for w in widths))
        else:
            states.append(tuple(flat_initial.pop(0) for _ in widths))
    outs = []
    for t in range(T):
        keep = (
            torch.ones(B, 1, dtype=torch.bool)
            if lengths is None
            else torch.from_numpy((t < lengths)[:, None])
        ).to(x_t.device)
        y = x_t[t]
        for k, cell in enumerate(cells):
            y, new = cell(y, states[k] if len(states[k]) == 2 else states[k][0])
            new = tuple(new) if isinstance(new, (tuple, list)) else (new,)
            states[k] = tuple(torch.where(keep, a, b) for a, b in zip(new, states[k], strict=True))
        outs.append(y * keep)
    return torch.stack(outs), tuple(s for state in states for s in state)


def flat(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def keras_run(model, inputs: list[np.ndarray], seed: int):
    """Runs a Keras model on `inputs`; returns (outputs, loss weights, gradients of
    Σ_k Σ out_k·R_k with respect to the float inputs and to each trainable weight, keyed by the
    weight's path)."""
    tf = tf_module()
    ts = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        for t in ts:
            if t.dtype.is_floating:
                tape.watch(t)
        outs = flat(model(ts if len(ts) > 1 else ts[0], training=False))
        rs = loss_weights(outs, seed)
        loss = tf.add_n([tf.reduce_sum(o * r) for o, r in zip(outs, rs, strict=True)])
    weights = model.trainable_weights
    float_inputs = [t for t in ts if t.dtype.is_floating]
    grads = tape.gradient(loss, float_inputs + list(weights))
    in_grads = [g.numpy() for g in grads[: len(float_inputs)]]
    w_grads = {w.path: g.numpy() for w, g in zip(weights, grads[len(float_inputs) :], strict=True)}
    return [o.numpy() for o in outs], rs, in_grads, w_grads


def torch_loss(outs, rs) -> torch.Tensor:
    return sum((o * torch.from_numpy(r)).sum() for o, r in zip(outs, rs, strict=True))


def module_params(module: torch.nn.Module, prefix: str = "") -> dict[str, torch.nn.Parameter]:
    return {f"{prefix}{n}": p for n, p in module.named_parameters()}


_NO_TF = (
    "import sys\n"
    "for name in ('tensorflow', 'tf_keras', 'keras'):\n"
    "    sys.modules[name] = None  # `import tensorflow` raises ImportError, as if absent\n"
    "from torch_lstm_grad.tools import cli\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def convert_without_tf(src, out, *extra) -> str:
    """`torch-lstm-grad convert SRC -o OUT` in a fresh interpreter where TensorFlow, Keras and
    tf_keras cannot be imported; returns its log, and fails with it when the exit code is not 0."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NO_TF, "convert", str(src), "-o", str(out), *map(str, extra)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def same_modules(a: dict, b: dict) -> None:
    """Two conversions' modules: the same names, classes and parameters, bit for bit."""
    assert sorted(a) == sorted(b)
    for name in a:
        assert type(a[name]) is type(b[name]), name
        sa, sb = a[name].state_dict(), b[name].state_dict()
        assert sorted(sa) == sorted(sb), name
        for k in sa:
            assert torch.equal(sa[k], sb[k]), f"{name}.{k}"


def descriptions_as_logged(modules, log: str) -> None:
    """load() gives each module the description `convert` printed for it: every module's
    `port_description.lines()` stand in the log, indented as printed."""
    for m in modules:
        assert "\n".join("  " + line for line in m.port_description.lines()) in log
