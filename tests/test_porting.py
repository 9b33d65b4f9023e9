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


# -- the TF-free TensorBundle reader (porting.read_variables(reader="tensorbundle")) -----------


def _tf_entries(prefix):
    """Every readable entry of a checkpoint, read by TF: name -> NumPy array."""
    tf = tf_module()
    r = tf.train.load_checkpoint(str(prefix))
    out = {}
    for name, dtype in r.get_variable_to_dtype_map().items():
        if dtype not in (tf.string, tf.resource, tf.variant):
            out[name] = np.asarray(r.get_tensor(name))
    return out


def _same_bits(ours, theirs):
    """Equal shape and bytes (bfloat16 from TF compared after widening, as ours is)."""
    if theirs.dtype.name == "bfloat16":
        theirs = theirs.astype(np.float32)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


def test_tensorbundle_reader_tf1_saver_all_dtypes(tmp_path):
    """A TF1 Saver checkpoint with every supported dtype, a scalar, an empty tensor and enough
    long names to fill several index data blocks: every entry equals TF's, bit for bit, with
    the crc32c of the blocks and of every tensor verified."""
    from torch_lstm_grad._tensorbundle import TensorBundleReader

    rng = np.random.default_rng(7)
    values = {
        "f32": _rand(3, 5),
        "f64": rng.standard_normal((2, 3)),
        "f16": rng.standard_normal(7).astype(np.float16),
        "bf16": np.array([1.5, -2.25, 3.0e38, 1e-39], np.float32),  # cast to bfloat16 below
        "i32": rng.integers(-9, 9, (4,), dtype=np.int32),
        "i64": np.int64(-(2**40)),
        "i8": np.array([-128, 0, 127], np.int8),
        "u8": np.array([0, 255], np.uint8),
        "flag": np.array([True, False, True]),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.float32(3.25),
    }
    values |= {
        f"rnn/multi_rnn_cell/cell_{k:03d}/some_long_scope/kernel": _rand(2) for k in range(300)
    }
    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        for n, v in values.items():
            c = tf.constant(v)
            if n == "bf16":
                c = tf.cast(c, tf.bfloat16)
            tf.compat.v1.get_variable(n, initializer=c)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "m"))
    want = _tf_entries(tmp_path / "m")
    r = TensorBundleReader(tmp_path / "m", verify_crc=True)
    assert set(r.entries) == set(want) == set(values)
    dtypes = r.get_variable_to_dtype_map()
    assert dtypes["bf16"] == "bfloat16" and dtypes["f16"] == "float16" and dtypes["i64"] == "int64"
    for name in want:
        _same_bits(r.get_tensor(name), want[name])
    assert r.get_tensor("bf16").tolist()[:2] == [1.5, -2.25]
    # porting's two readers agree on the float variables (bfloat16 widened by both).
    ours = porting.read_variables(tmp_path / "m", reader="tensorbundle")
    theirs = porting.read_variables(tmp_path / "m", reader="tensorflow")
    assert (
        set(ours) == set(theirs) == {n for n in values if n[0] == "r" or n[0] in "fbes"} - {"flag"}
    )
    for name in theirs:
        _same_bits(ours[name], theirs[name])


def test_tensorbundle_reader_tf2_checkpoint_and_shards(tmp_path):
    """TF2 tf.train.Checkpoint (the `_CHECKPOINTABLE_OBJECT_GRAPH` string and save_counter
    skipped), written whole and split over several data shards."""
    from torch_lstm_grad._tensorbundle import TensorBundleReader

    tf = tf_module()
    mod = tf.Module()
    mod.kernel = tf.Variable(_rand(I + H, 4 * H))
    mod.bias = tf.Variable(_rand(4 * H))
    mod.half = tf.Variable(_rand(3, 3).astype(np.float16))
    mod.big = tf.Variable(_rand(64, 64))
    ckpt = tf.train.Checkpoint(net=mod)
    prefixes = [ckpt.save(str(tmp_path / "whole"))]
    policy = getattr(tf.train.experimental, "MaxShardSizePolicy", None)
    if policy is not None:
        opts = tf.train.CheckpointOptions(
            experimental_sharding_callback=policy(max_shard_size=4096)
        )
        prefixes.append(ckpt.write(str(tmp_path / "sharded"), options=opts))
    for prefix in prefixes:
        want = _tf_entries(prefix)
        r = TensorBundleReader(prefix, verify_crc=True)
        assert r.get_variable_to_dtype_map()["_CHECKPOINTABLE_OBJECT_GRAPH"] == "string"
        assert set(want) == set(r.entries) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
        for name in want:
            _same_bits(r.get_tensor(name), want[name])
        ours = porting.read_variables(prefix, reader="tensorbundle")
        assert set(ours) == {f"net/{n}" for n in ("kernel", "bias", "half", "big")}
        np.testing.assert_array_equal(ours["net/big"], mod.big.numpy())
    if policy is not None:
        assert TensorBundleReader(prefixes[1]).num_shards > 1


def test_tensorbundle_convert_without_tensorflow(tmp_path, capsys, monkeypatch):
    """`convert` through the TF-free reader (forced by the environment variable, and chosen by
    "auto" when `import tensorflow` fails) writes the same modules as through TF."""
    p = "cudnn_lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/"
    values = {
        "rnn/lstm_cell/kernel": _rand(I + H, 4 * H),
        "rnn/lstm_cell/bias": _rand(4 * H),
        p + "kernel": _rand(I + H, 4 * H),
        p + "bias": _rand(4 * H),
        "global_step": np.int64(5),
    }
    _tf1_save(tmp_path / "m", values)
    mods_tf, log_tf = _convert(tmp_path / "m", tmp_path / "tf.pt", capsys)
    monkeypatch.setenv(porting.READER_ENV, "tensorbundle")
    mods_free, log_free = _convert(tmp_path / "m", tmp_path / "free.pt", capsys)
    monkeypatch.delenv(porting.READER_ENV)
    monkeypatch.setitem(__import__("sys").modules, "tensorflow", None)  # import fails
    data = porting.convert(tmp_path / "m", tmp_path / "auto.pt", log=lambda line: None)
    mods_auto = porting.load(tmp_path / "auto.pt")
    assert "ignored: global_step" not in log_free  # an int64: not read as a float variable
    assert log_free.replace("free.pt", "tf.pt") == log_tf.replace("free.pt", "tf.pt")
    assert set(mods_tf) == set(mods_free) == set(mods_auto) == set(data["modules"])
    for k in mods_tf:
        for mods in (mods_free, mods_auto):
            a, b = mods_tf[k].state_dict(), mods[k].state_dict()
            assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    with pytest.raises(ValueError, match="reader="):
        porting.read_variables(tmp_path / "m", reader="nope")


def test_tensorbundle_reader_slices_and_errors(tmp_path):
    """A TF1 partitioned variable is assembled from its slices; a snappy-flagged block, a bad
    magic and a missing prefix give clear errors."""
    from torch_lstm_grad._tensorbundle import TensorBundleReader

    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.get_variable(
            "part", initializer=tf.constant(_rand(6, 2)),
            partitioner=tf.compat.v1.fixed_size_partitioner(2),
        )  # fmt: skip
        tf.compat.v1.get_variable("whole", initializer=tf.constant(_rand(2)))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "p"))
    r = TensorBundleReader(tmp_path / "p", verify_crc=True)
    want = _tf_entries(tmp_path / "p")
    assert r.entries["part"].sliced and r.get_variable_to_shape_map()["part"] == [6, 2]
    assert set(r.entries) == set(want) == {"part", "whole"}
    for name in want:
        _same_bits(r.get_tensor(name), want[name])
    ours = porting.read_variables(tmp_path / "p", reader="tensorbundle")
    np.testing.assert_array_equal(ours["part"], want["part"])
    index = (tmp_path / "p.index").read_bytes()
    # Flag the index block (its handle closes the footer's first varints) as snappy-compressed.
    from torch_lstm_grad import _tensorbundle as tb

    footer = index[-48:]
    _, pos = tb._varint(footer, 0)
    _, pos = tb._varint(footer, pos)
    off, pos = tb._varint(footer, pos)
    size, _ = tb._varint(footer, pos)
    snappy = bytearray(index)
    snappy[off + size] = 1
    (tmp_path / "s.index").write_bytes(bytes(snappy))
    with pytest.raises(NotImplementedError, match="snappy"):
        TensorBundleReader(tmp_path / "s")
    (tmp_path / "bad.index").write_bytes(index[:-1] + b"\x00")
    with pytest.raises(ValueError, match="not a Keras file.*bad magic"):
        porting.read_variables(tmp_path / "bad", reader="tensorbundle")
    with pytest.raises(ValueError, match="not a Keras file.*no such file"):
        porting.read_variables(tmp_path / "nothing", reader="tensorbundle")


# -- TF1 contrib CudnnLSTM / CudnnGRU canonical names (tf_semantics §7.5) ---------------------


def _tf1_save_as(path, values: dict):
    """Like `_tf1_save`, but checkpoint keys may be any string (the old `bias_cudnn 0` has a
    space, which no TF op name can hold): variables get plain op names, the Saver maps keys."""
    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        vs = {
            n: tf.compat.v1.get_variable(f"v{k}", initializer=tf.constant(x))
            for k, (n, x) in enumerate(values.items())
        }
        saver = tf.compat.v1.train.Saver(var_list=vs)
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(path))


def _cell_prefix(outer, layer, d, bidi, kind):
    where = (
        f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{('fw', 'bw')[d]}"
        if bidi
        else f"rnn/multi_rnn_cell/cell_{layer}"
    )
    return f"{outer}/{where}/cudnn_compatible_{kind}_cell/"


def _lstm_values(outer, L, bidi, separate=False):
    """Canonical-name LSTM variables in TF1's documented layout: kernel [in + H, 4H] (ICFO
    columns), bias [4H] = bW + bR; with `separate`, also bias_cudnn_0/1 (bW, bR) and a `bias`
    that deliberately is not their sum (so the test shows which one was used)."""
    D, values = 2 if bidi else 1, {}
    for layer in range(L):
        for d in range(D):
            p = _cell_prefix(outer, layer, d, bidi, "lstm")
            values[p + "kernel"] = _rand((I if layer == 0 else D * H) + H, 4 * H)
            values[p + "bias"] = _rand(4 * H)
            if separate:
                values[p + "bias_cudnn_0"] = _rand(4 * H)
                values[p + "bias_cudnn_1"] = _rand(4 * H)
    return values


def _torch_lstm_reference(values, outer, L, bidi, separate=False):
    """torch.nn.LSTM with the same weights, built straight from the TF layout: kernelᵀ's row
    blocks are i, c, f, o; torch's are i, f, g(=c), o."""
    D = 2 if bidi else 1
    ref = torch.nn.LSTM(I, H, num_layers=L, bidirectional=bidi)
    perm = torch.cat([torch.arange(H) + k * H for k in (0, 2, 1, 3)])
    with torch.no_grad():
        for layer in range(L):
            for d in range(D):
                p = _cell_prefix(outer, layer, d, bidi, "lstm")
                n_in = I if layer == 0 else D * H
                w = torch.from_numpy(values[p + "kernel"]).t()[perm]
                if separate:
                    b_ih = torch.from_numpy(values[p + "bias_cudnn_0"])[perm]
                    b_hh = torch.from_numpy(values[p + "bias_cudnn_1"])[perm]
                else:
                    b_ih = torch.from_numpy(values[p + "bias"])[perm]
                    b_hh = torch.zeros(4 * H)
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                getattr(ref, "weight_ih" + sfx).copy_(w[:, :n_in])
                getattr(ref, "weight_hh" + sfx).copy_(w[:, n_in:])
                getattr(ref, "bias_ih" + sfx).copy_(b_ih)
                getattr(ref, "bias_hh" + sfx).copy_(b_hh)
    return ref


def _gru_values(outer, L, bidi, separate=False):
    """Canonical-name GRU variables: gates/kernel [in + H, 2H] (columns r, u), gates/bias [2H]
    (= bW + bR), candidate/input_projection/kernel = W_hᵀ [in, H], .../hidden_projection/kernel
    = R_hᵀ [H, H], their biases bW_h, bR_h; with `separate`, the old `bias_cudnn 0` / `bias_cudnn
    1` ([bW_r, bW_z], [bR_r, bR_z]) and a gates/bias that is not their sum."""
    D, values = 2 if bidi else 1, {}
    for layer in range(L):
        for d in range(D):
            p = _cell_prefix(outer, layer, d, bidi, "gru")
            n_in = I if layer == 0 else D * H
            values[p + "gates/kernel"] = _rand(n_in + H, 2 * H)
            values[p + "gates/bias"] = _rand(2 * H)
            values[p + "candidate/input_projection/kernel"] = _rand(n_in, H)
            values[p + "candidate/input_projection/bias"] = _rand(H)
            values[p + "candidate/hidden_projection/kernel"] = _rand(H, H)
            values[p + "candidate/hidden_projection/bias"] = _rand(H)
            if separate:
                values[p + "bias_cudnn 0"] = _rand(2 * H)
                values[p + "bias_cudnn 1"] = _rand(2 * H)
    return values


def _torch_gru_reference(values, outer, L, bidi, separate=False):
    """torch.nn.GRU (rows r, z, n; n = tanh(W_n x + b_in + r ⊙ (R_n h + b_hn)), the
    CudnnCompatibleGRUCell's candidate) with the same weights, from the TF layout."""
    D = 2 if bidi else 1
    ref = torch.nn.GRU(I, H, num_layers=L, bidirectional=bidi)
    with torch.no_grad():
        for layer in range(L):
            for d in range(D):
                p = _cell_prefix(outer, layer, d, bidi, "gru")
                n_in = I if layer == 0 else D * H
                v = {k[len(p) :]: torch.from_numpy(x) for k, x in values.items() if k.startswith(p)}
                gk = v["gates/kernel"]
                if separate:
                    b_ru_ih, b_ru_hh = v["bias_cudnn 0"], v["bias_cudnn 1"]
                else:
                    b_ru_ih, b_ru_hh = v["gates/bias"], torch.zeros(2 * H)
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                getattr(ref, "weight_ih" + sfx).copy_(
                    torch.cat([gk[:n_in].t(), v["candidate/input_projection/kernel"].t()])
                )
                getattr(ref, "weight_hh" + sfx).copy_(
                    torch.cat([gk[n_in:].t(), v["candidate/hidden_projection/kernel"].t()])
                )
                getattr(ref, "bias_ih" + sfx).copy_(
                    torch.cat([b_ru_ih, v["candidate/input_projection/bias"]])
                )
                getattr(ref, "bias_hh" + sfx).copy_(
                    torch.cat([b_ru_hh, v["candidate/hidden_projection/bias"]])
                )
    return ref


def _check_against(mod, ref, D, L):
    x = torch.randn(T, B, I)
    got, state = mod(x)
    want, want_state = ref(x)
    assert got.shape == (T, B, D * H) and state[0].shape == (L * D, B, H)
    torch.testing.assert_close(got, want, atol=TOL, rtol=TOL)
    want_state = want_state if isinstance(want_state, tuple) else (want_state,)
    for a, b in zip(state, want_state, strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("separate", [False, True], ids=["summed_bias", "bias_cudnn"])
def test_tf1_cudnn_lstm_bidirectional_checkpoint(tmp_path, capsys, separate):
    """Bidirectional 2-layer CudnnLSTM canonical names (+ opaque_kernel) → CudnnLSTM
    (direction="bidirectional"), outputs and final states equal to torch.nn.LSTM's with the
    same weights; biases halved into bW = bR, or bias_cudnn_0/1 taken as bW, bR."""
    values = _lstm_values("enc", 2, True, separate) | {"enc/opaque_kernel": _rand(9)}
    _tf1_save(tmp_path / "m", values)
    mods, log = _convert(tmp_path / "m", tmp_path / "out.pt", capsys)
    assert list(mods) == ["enc"] and "ignored" not in log
    m = mods["enc"]
    assert isinstance(m, modules.CudnnLSTM) and m.direction == "bidirectional"
    assert m.num_layers == 2 and m.input_size == I and m.num_units == H
    _check_against(m, _torch_lstm_reference(values, "enc", 2, True, separate), 2, 2)
    _, biases = m.canonical_weights()
    p = _cell_prefix("enc", 1, 1, True, "lstm")  # layer 1, bw: pseudo-layer 3
    icfo_i = slice(0, H)
    if separate:
        assert torch.equal(biases[3 * 8], torch.from_numpy(values[p + "bias_cudnn_0"][icfo_i]))
        assert torch.equal(biases[3 * 8 + 4], torch.from_numpy(values[p + "bias_cudnn_1"][icfo_i]))
    else:
        half = torch.from_numpy(values[p + "bias"][icfo_i]) * 0.5
        assert torch.equal(biases[3 * 8], half) and torch.equal(biases[3 * 8 + 4], half)


@pytest.mark.parametrize(
    "bidi,separate", [(False, False), (True, False), (False, True), (True, True)],
    ids=["uni", "bidi", "uni_bias_cudnn", "bidi_bias_cudnn"],
)  # fmt: skip
def test_tf1_cudnn_gru_checkpoint(tmp_path, capsys, bidi, separate):
    """CudnnGRU canonical names (uni- and bidirectional, 2 layers; summed gate biases halved or
    the old separate `bias_cudnn 0/1`) → CudnnGRU, equal to torch.nn.GRU with the same weights.
    Read by the TF-free reader."""
    values = _gru_values("dec/gru", 2, bidi, separate)
    _tf1_save_as(tmp_path / "m", values)
    mods, log = _convert(tmp_path / "m", tmp_path / "out.pt", capsys, "--forget-bias", "1")
    entries, ignored = porting.map_variables(
        porting.read_variables(tmp_path / "m", reader="tensorbundle")
    )
    assert list(mods) == list(entries) == ["dec.gru"] and not ignored and "ignored" not in log
    m = mods["dec.gru"]
    assert isinstance(m, modules.CudnnGRU) and m.num_layers == 2
    assert m.direction == ("bidirectional" if bidi else "unidirectional")
    D = 2 if bidi else 1
    _check_against(m, _torch_gru_reference(values, "dec/gru", 2, bidi, separate), D, 2)
    sd = entries["dec.gru"]["state_dict"]
    assert torch.equal(sd["opaque_kernel"], m.opaque_kernel)


def test_cudnn_canonical_names_unscoped_incomplete_and_mixed(tmp_path, capsys):
    """Names without an outer scope (→ `cudnn_gru`), a bidirectional set missing a direction
    or a leaf (→ error naming it), and an old-style `multi_rnn_cell/...` without `rnn/`."""
    gru = {k.removeprefix("x/"): v for k, v in _gru_values("x", 1, False).items()}
    entries, ignored = porting.map_variables(gru)
    assert list(entries) == ["cudnn_gru"] and not ignored
    old = {k.replace("x/rnn/", ""): v for k, v in _lstm_values("x", 1, False).items()}
    entries, _ = porting.map_variables(old)
    assert list(entries) == ["cudnn_lstm"] and entries["cudnn_lstm"]["config"]["num_layers"] == 1
    scoped = {"s/" + k: v for k, v in old.items()}
    assert list(porting.map_variables(scoped)[0]) == ["s"]
    lstm = _lstm_values("enc", 2, True)
    del lstm[_cell_prefix("enc", 1, 1, True, "lstm") + "kernel"]
    del lstm[_cell_prefix("enc", 1, 1, True, "lstm") + "bias"]
    with pytest.raises(ValueError, match=r"enc \(TF1 CudnnLSTM.*cell_1/fw; expected"):
        porting.map_variables(lstm)
    bigru = _gru_values("b", 1, True)
    del bigru[_cell_prefix("b", 0, 1, True, "gru") + "candidate/hidden_projection/bias"]
    _tf1_save_as(tmp_path / "g", bigru)
    assert cli.main(["convert", str(tmp_path / "g"), "-o", str(tmp_path / "g.pt")]) == 2
    err = capsys.readouterr().err
    assert "cell_0/bw missing ['candidate/hidden_projection/bias']" in err
