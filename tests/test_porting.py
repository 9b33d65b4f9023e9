"""porting.py and `torch-lstm-grad convert`: fixtures written by TF/Keras into tmp_path (TF1 Saver
checkpoints with TF1's variable names, a TF2 tf.train.Checkpoint, a Keras .keras file), converted,
loaded back with porting.load and run against TF's own numbers."""

import numpy as np
import pytest
import torch
from tf_oracle import available as _tf_available
from tf_oracle import tf_module

from torch_lstm_grad import cli, modules, porting

pytestmark = pytest.mark.skipif(not _tf_available(), reason="TensorFlow is not installed")
TOL = 1e-5  # float32 ours vs TF/Keras (test_layouts measures <= 3.3e-7 on the same kinds of runs)
T, B, I, H = 5, 2, 3, 4  # noqa: E741


def _rand(*shape, seed=[0]):  # noqa: B006 (a counter)
    seed[0] += 1
    return np.random.default_rng(seed[0]).uniform(-0.5, 0.5, shape).astype(np.float32)


def _tf1_save(path, values: dict, fetch=None):
    """Variables with TF1 names saved by a tf.compat.v1 Saver (graph mode); `fetch(vars)` builds a
    graph tensor to evaluate (TF's reference output)."""
    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        vs = {
            n: tf.compat.v1.get_variable(n, initializer=tf.constant(v)) for n, v in values.items()
        }
        out = fetch(vs) if fetch else None
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            result = sess.run(out) if fetch else None
            saver.save(sess, str(path))
    return result


def _convert(src, out, capsys, *extra):
    assert cli.main(["convert", str(src), "-o", str(out), *extra]) == 0
    return porting.load(out), capsys.readouterr().out


def test_tf1_lstm_cell_checkpoint(tmp_path, capsys):
    """TF1 LSTMCell/LSTMBlockCell names (peepholes on) → LSTMBlockCell; TF's numbers from
    tf.raw_ops.BlockLSTM (forget_bias 1, no clip: what those cells compute)."""
    tf = tf_module()
    x = np.random.default_rng(0).standard_normal((T, B, I)).astype(np.float32)
    values = {
        "rnn/lstm_cell/kernel": _rand(I + H, 4 * H),
        "rnn/lstm_cell/bias": _rand(4 * H),
        "rnn/lstm_cell/w_i_diag": _rand(H),
        "rnn/lstm_cell/w_f_diag": _rand(H),
        "rnn/lstm_cell/w_o_diag": _rand(H),
        "global_step_like": np.float32(3),
    }

    def fetch(v):
        z = tf.zeros([B, H])
        return tf.raw_ops.BlockLSTM(
            seq_len_max=tf.constant(T, tf.int64),
            x=x,
            cs_prev=z,
            h_prev=z,
            w=v["rnn/lstm_cell/kernel"],
            wci=v["rnn/lstm_cell/w_i_diag"],
            wcf=v["rnn/lstm_cell/w_f_diag"],
            wco=v["rnn/lstm_cell/w_o_diag"],
            b=v["rnn/lstm_cell/bias"],
            forget_bias=1.0,
            cell_clip=-1.0,
            use_peephole=True,
        ).h

    want = _tf1_save(tmp_path / "model.ckpt", values, fetch)
    mods, log = _convert(tmp_path / "model.ckpt", tmp_path / "out.pt", capsys)
    assert "rnn.lstm_cell: LSTMBlockCell" in log and "ignored: global_step_like" in log
    cell = mods["rnn.lstm_cell"]
    assert isinstance(cell, modules.LSTMBlockCell) and cell.use_peephole and cell.forget_bias == 1.0
    assert torch.equal(cell.w_o_diag, torch.from_numpy(values["rnn/lstm_cell/w_o_diag"]))
    state, hs = None, []
    for t in range(T):
        h, state = cell(torch.from_numpy(x[t]), state)
        hs.append(h)
    torch.testing.assert_close(torch.stack(hs), torch.from_numpy(want), atol=TOL, rtol=TOL)


def test_tf1_fused_and_cudnn_canonical_checkpoint(tmp_path, capsys):
    """lstm_fused_cell → LSTMBlockFusedCell; CudnnLSTM canonical names (2 layers) with the
    opaque_kernel beside them → CudnnLSTM, equal to the two cudnn_compatible cells stacked."""
    p = "cudnn_lstm/rnn/multi_rnn_cell/cell_{}/cudnn_compatible_lstm_cell/"
    values = {
        "lstm_fused_cell/kernel": _rand(I + H, 4 * H),
        "lstm_fused_cell/bias": _rand(4 * H),
        p.format(0) + "kernel": _rand(I + H, 4 * H),
        p.format(0) + "bias": _rand(4 * H),
        p.format(1) + "kernel": _rand(2 * H, 4 * H),
        p.format(1) + "bias": _rand(4 * H),
        "cudnn_lstm/opaque_kernel": _rand(7),
    }
    _tf1_save(tmp_path / "m", values)
    mods, log = _convert(tmp_path / "m", tmp_path / "out.pt", capsys)
    assert set(mods) == {"lstm_fused_cell", "cudnn_lstm"}
    fused, cudnn = mods["lstm_fused_cell"], mods["cudnn_lstm"]
    assert isinstance(fused, modules.LSTMBlockFusedCell) and isinstance(cudnn, modules.CudnnLSTM)
    assert cudnn.num_layers == 2 and "ignored" not in log
    x = torch.randn(T, B, I)
    y = x
    for layer in range(2):
        cell = modules.LSTMBlockFusedCell(H, y.shape[-1], forget_bias=0.0)
        cell.load_state_dict(
            {
                "kernel": torch.from_numpy(values[p.format(layer) + "kernel"]),
                "bias": torch.from_numpy(values[p.format(layer) + "bias"]),
            }
        )
        y, _ = cell(y)
    torch.testing.assert_close(cudnn(x)[0], y, atol=TOL, rtol=TOL)


def test_tf2_checkpoint_gru_block(tmp_path, capsys):
    """A TF2 tf.train.Checkpoint with GRUCell's gates/ and candidate/ names → GRUBlockCell,
    against tf.raw_ops.GRUBlockCell."""
    tf = tf_module()
    mod = tf.Module()
    mod.gates, mod.candidate = tf.Module(), tf.Module()
    mod.gates.kernel = tf.Variable(_rand(I + H, 2 * H))
    mod.gates.bias = tf.Variable(_rand(2 * H))
    mod.candidate.kernel = tf.Variable(_rand(I + H, H))
    mod.candidate.bias = tf.Variable(_rand(H))
    prefix = tf.train.Checkpoint(gru=mod).write(str(tmp_path / "ckpt"))
    mods, _ = _convert(prefix, tmp_path / "out.pt", capsys)
    cell = mods["gru"]
    x, h = _rand(B, I), _rand(B, H)
    want = tf.raw_ops.GRUBlockCell(
        x=x,
        h_prev=h,
        w_ru=mod.gates.kernel,
        w_c=mod.candidate.kernel,
        b_ru=mod.gates.bias,
        b_c=mod.candidate.bias,
    ).h.numpy()
    got, _ = cell(torch.from_numpy(x), torch.from_numpy(h))
    torch.testing.assert_close(got, torch.from_numpy(want), atol=TOL, rtol=TOL)


def test_keras_file(tmp_path, capsys):
    tf = tf_module()
    import keras

    model = keras.Sequential(
        [
            keras.Input((T, I)),
            keras.layers.LSTM(H, return_sequences=True),
            keras.layers.GRU(H, return_sequences=True),
            keras.layers.GRU(H, return_sequences=True, reset_after=False),
        ]
    )
    model.save(tmp_path / "m.keras")
    mods, log = _convert(tmp_path / "m.keras", tmp_path / "out.pt", capsys)
    lstm, gru, gru_block = (mods[f"layers.{n}.cell"] for n in ("lstm", "gru", "gru_1"))
    assert isinstance(gru, modules.CudnnGRU) and isinstance(gru_block, modules.GRUBlockCell)
    x = np.random.default_rng(1).standard_normal((B, T, I)).astype(np.float32)
    y = x
    ours = torch.from_numpy(x).transpose(0, 1)
    for layer, m in zip(model.layers, (lstm, gru, gru_block), strict=True):
        y = layer(tf.constant(y)).numpy().copy()
        if isinstance(m, modules.GRUBlockCell):
            h, outs = None, []
            for t in range(T):
                o, h = m(ours[t], h)
                outs.append(o)
            ours = torch.stack(outs)
        else:
            ours = m(ours)[0]
        torch.testing.assert_close(ours.transpose(0, 1), torch.from_numpy(y), atol=TOL, rtol=TOL)
    # The weights file alone maps the same way.
    model.save_weights(tmp_path / "m.weights.h5")
    porting.convert(tmp_path / "m.weights.h5", tmp_path / "w.pt", log=lambda line: None)
    mods2 = porting.load(tmp_path / "w.pt")
    assert mods2.keys() == mods.keys()
    for k in mods:
        sd, sd2 = mods[k].state_dict(), mods2[k].state_dict()
        assert all(torch.equal(sd[n], sd2[n]) for n in sd)


def test_incomplete_and_unknown(tmp_path, capsys):
    _tf1_save(
        tmp_path / "a",
        {"rnn/lstm_cell/kernel": _rand(I + H, 4 * H), "rnn/lstm_cell/w_i_diag": _rand(H)},
    )
    assert cli.main(["convert", str(tmp_path / "a"), "-o", str(tmp_path / "a.pt")]) == 2
    err = capsys.readouterr().err
    assert "rnn/lstm_cell" in err and "missing ['bias', 'w_f_diag', 'w_o_diag']" in err
    _tf1_save(tmp_path / "b", {"cudnn_lstm/opaque_kernel": _rand(10)})
    assert cli.main(["convert", str(tmp_path / "b"), "-o", str(tmp_path / "b.pt")]) == 2
    assert "cudnn_compatible_lstm_cell" in capsys.readouterr().err
    _tf1_save(tmp_path / "c", {"dense/weights": _rand(3, 3)})
    assert cli.main(["convert", str(tmp_path / "c"), "-o", str(tmp_path / "c.pt")]) == 2
    assert "no LSTM/GRU variable set recognised among: dense/weights" in capsys.readouterr().err
    assert cli.main(["convert", str(tmp_path / "nothing"), "-o", str(tmp_path / "d.pt")]) == 2
    assert "not a Keras file" in capsys.readouterr().err
    torch.save({"x": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a torch-lstm-grad convert file"):
        porting.load(tmp_path / "other.pt")


def test_dense_kernel_bias_pair_is_ignored_not_misread():
    """A dense layer's kernel [H, OUT] / bias [OUT] is not an LSTM cell's pair."""
    variables = {
        "rnn/lstm_cell/kernel": _rand(I + H, 4 * H),
        "rnn/lstm_cell/bias": _rand(4 * H),
        "dense/kernel": _rand(H, 3),
        "dense/bias": _rand(3),
    }
    entries, ignored = porting.map_variables(variables)
    assert list(entries) == ["rnn.lstm_cell"]
    assert ignored == ["dense/bias", "dense/kernel"]


def test_porting_example_runs(tmp_path):
    """examples/port_tf1_lstm.py: TF-trained model, converted, reproduced (outputs and grads)."""
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "examples", "port_tf1_lstm.py")
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK (worst scaled error" in done.stdout
