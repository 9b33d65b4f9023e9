"""What `convert` writes: the converted file's digest (the SHA-256 of its contents in a canonical
form, pinned; load() refuses a file whose digest differs), a float64 Keras layer kept float64,
and the log naming the variables each layer used and those left out."""

import warnings

import numpy as np
import torch

from tests.helpers import STATES_B as B
from tests.helpers import STATES_I as I
from tests.helpers import STATES_T as T
from tests.helpers import assert_close, keras_module, needs_tf, randomize


@needs_tf
def test_converted_file_digest_is_the_format_s():
    """A converted file carries the SHA-256 of its contents in a canonical form, and load()
    refuses a file whose digest differs: that form is part of format /3, so files this version
    wrote stay loadable only while it is unchanged. Pinned on a dict of every kind of value a
    converted file holds (the digest key itself left out); each marker of the form (a dict's, a
    list's, a tuple's, a tensor's dtype and shape, a scalar's type) changes it."""
    from torch_lstm_grad.porting.convert import _digest

    def data(**change):
        state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
        d = {
            "format": "torch_lstm_grad.convert/3",
            "modules": {"g": {"config": {"units": 3, "bias": None, "x": 1.5, "ok": True},
                              "state": state}},
            "order": ["g"],
            "pair": (1, b"a"),
            "empty": {},
        }  # fmt: skip
        d.update(change)
        return d

    pinned = "bdc7c6efcbc03a2510af0b8983dbb766f6e1bb94d404d8a8de63dc1e5a02929f"
    assert _digest(data()) == pinned
    assert _digest(data(sha256="anything")) == pinned
    changed = [
        data(empty=[]),
        data(empty=()),
        data(order=("g",)),
        data(pair=[1, b"a"]),
        data(pair=(1.0, b"a")),
        data(pair=(True, b"a")),
        data(pair=(1, "a")),
        data(pair=(1,), a=b"a"),
        data(empty={"": None}),
        data(modules={"g": {"state": {"w": torch.arange(6, dtype=torch.float32)}}}),
        data(modules={"g": {"state": {"w": torch.arange(6, dtype=torch.int32).reshape(2, 3)}}}),
    ]
    digests = {_digest(d) for d in changed}
    assert pinned not in digests and len(digests) == len(changed)


# ---------------------------------------------------------------------------------------------
# Through the converter: what a port keeps (dtype, the variables it used).


@needs_tf
def test_converted_float64_layer_and_the_variables_it_used(tmp_path, capsys):
    """A float64 Keras LSTM converts to a float64 module computing Keras' float64 numbers; the
    log names each layer's variables; the whole model holds the Dense layer's, which the
    recurrent layers alone (--layers-only) leave out."""
    from torch_lstm_grad import porting
    from torch_lstm_grad.tools import cli

    keras = keras_module()
    x_in = keras.Input((T, I))
    lstm = keras.layers.LSTM(4, return_sequences=True, dtype="float64", name="lstm64")
    bi = keras.layers.Bidirectional(keras.layers.GRU(3), name="bi")
    model = keras.Model(x_in, keras.layers.Dense(2, name="head")(bi(lstm(x_in))))
    randomize(model.trainable_weights, 25)
    model.save(tmp_path / "m.keras")
    assert cli.main(["convert", str(tmp_path / "m.keras"), "-o", str(tmp_path / "o.pt")]) == 0
    captured = capsys.readouterr()
    log = captured.out
    assert "WARNING" not in captured.err  # an exact port: no approximation to warn of
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # load warns for a file converted with --approximate
        mods = porting.load(tmp_path / "o.pt")
    assert mods["lstm64"].kernel.dtype == torch.float64
    x = np.random.default_rng(26).standard_normal((B, T, I))
    want = lstm(x.astype(np.float64)).numpy()
    got = mods["lstm64"](torch.from_numpy(x))
    assert got.dtype == torch.float64
    assert_close({"float64 output": (got, want)}, tol=1e-12)
    lines = log.splitlines()
    for layer, module in (("lstm64", "KerasLSTM"), ("bi", "KerasBidirectional")):
        (line,) = [ln for ln in lines if ln.startswith(f"{layer}: {module} <- ")]
        used = line.split(" <- ", 1)[1].split(";")[0].split(", ")
        mine = sorted(w.path for w in model.get_layer(layer).trainable_weights)
        assert sorted(used) == mine, line
    # the whole model holds every weight, the Dense layer's too
    assert not [ln for ln in lines if "(left out)" in ln]
    assert [ln for ln in lines if ln.startswith("model: functional")
            and ln.endswith(" as one KerasModel (load_model)")], log  # fmt: skip
    # the recurrent layers alone leave the Dense layer's weights out
    assert cli.main(["convert", str(tmp_path / "m.keras"), "-o", str(tmp_path / "r.pt"),
                     "--layers-only"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    left_out = sorted(ln.rsplit(": ", 1)[1] for ln in lines if "(left out)" in ln)
    # (a .keras archive names a Dense layer's weights by position: head/0, head/1)
    assert len(left_out) == 2 and all(n.startswith("head/") for n in left_out), left_out
