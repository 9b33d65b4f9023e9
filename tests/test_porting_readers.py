"""The readers under porting: the TF-free TensorBundle reader (every dtype, slices, shards,
checksums), the TF2 object graph and the TF1 meta graph read without TensorFlow, each against
TensorFlow's own reading of files TF wrote; and `convert` through both checkpoint readers."""

import os

import numpy as np
import pytest
import torch
from tf_oracle import available as _tf_available
from tf_oracle import tf_module

from torch_lstm_grad import porting
from torch_lstm_grad.porting.formats.object_graph import OBJECT_GRAPH_KEY, read_object_graph
from torch_lstm_grad.porting.graphs.graph_def import meta_graph_parts, read_meta_graph
from torch_lstm_grad.porting.graphs.tf1_cells import cell_at
from torch_lstm_grad.tools import cli

pytestmark = pytest.mark.skipif(not _tf_available(), reason="TensorFlow is not installed")
I, H = 3, 4  # noqa: E741
CUTKUM = os.path.join(os.path.dirname(__file__), "data", "cutkum", "frozen_model.pb")


def _rand(*shape, seed=[0]):  # noqa: B006 (a counter)
    seed[0] += 1
    return np.random.default_rng(seed[0]).uniform(-0.5, 0.5, shape).astype(np.float32)


def _tf1_save(path, values: dict):
    """Variables with the given names saved by a tf.compat.v1 Saver (graph mode); the
    checkpoint's path."""
    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        for n, v in values.items():
            tf.compat.v1.get_variable(n, initializer=tf.constant(v))
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.train.Saver().save(sess, str(path))


def _convert(src, out, capsys, *extra):
    assert cli.main(["convert", str(src), "-o", str(out), *extra]) == 0, capsys.readouterr()
    return porting.load(out), capsys.readouterr().out


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
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

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
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

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
        # The string entry's crc32c (lengths, their checksum and the bytes) checks out too.
        assert len(r.get_strings("_CHECKPOINTABLE_OBJECT_GRAPH")[0]) > 0
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
    mods_tf, log_tf = _convert(tmp_path / "m", tmp_path / "tf.pt", capsys, "--assume-defaults")
    monkeypatch.setenv(porting.READER_ENV, "tensorbundle")
    mods_free, log_free = _convert(
        tmp_path / "m", tmp_path / "free.pt", capsys, "--assume-defaults"
    )
    monkeypatch.delenv(porting.READER_ENV)
    monkeypatch.setitem(__import__("sys").modules, "tensorflow", None)  # import fails
    with pytest.raises(porting.Refused, match="--assume-defaults"):  # the API's default too
        porting.convert(tmp_path / "m", tmp_path / "auto.pt", log=lambda line: None)
    data = porting.convert(
        tmp_path / "m", tmp_path / "auto.pt", assume_defaults=True, log=lambda line: None
    )
    mods_auto = porting.load(tmp_path / "auto.pt")
    assert "ignored: global_step (optimizer or training counter)" in log_free
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
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.get_variable(
            "part",
            initializer=tf.constant(_rand(6, 2)),
            partitioner=tf.compat.v1.fixed_size_partitioner(2),
        )
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
    from torch_lstm_grad.porting.decoding import proto

    footer = index[-48:]
    _, pos = proto.varint(footer, 0)
    _, pos = proto.varint(footer, pos)
    off, pos = proto.varint(footer, pos)
    size, _ = proto.varint(footer, pos)
    snappy = bytearray(index)
    snappy[off + size] = 1
    (tmp_path / "s.index").write_bytes(bytes(snappy))
    with pytest.raises(NotImplementedError, match="snappy"):
        TensorBundleReader(tmp_path / "s")
    (tmp_path / "bad.index").write_bytes(index[:-1] + b"\x00")
    with pytest.raises(ValueError, match="a Keras file.*bad magic"):
        porting.read_variables(tmp_path / "bad", reader="tensorbundle")
    with pytest.raises(ValueError, match="a Keras file.*no such file"):
        porting.read_variables(tmp_path / "nothing", reader="tensorbundle")


def test_object_graph_read_without_tensorflow(tmp_path):
    """Our TrackableObjectGraph decoding against TF's protobuf classes on a Keras model's
    checkpoint written after fit, with the optimizer."""
    tf = tf_module()
    import keras
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    model = keras.Sequential([keras.Input((5, I)), keras.layers.LSTM(H), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.zeros((2, 5, I), np.float32), np.zeros((2, 2), np.float32), verbose=0)
    prefix = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "c"))
    data = tf.train.load_checkpoint(prefix).get_tensor(OBJECT_GRAPH_KEY)
    theirs = trackable_object_graph_pb2.TrackableObjectGraph()
    theirs.ParseFromString(data)
    want = {
        (a.checkpoint_key, a.full_name)
        for n in theirs.nodes
        for a in n.attributes
        if a.name == "VARIABLE_VALUE"
    }
    ours = read_object_graph(data)
    assert {(v.checkpoint_key, v.full_name) for v in ours} == want
    weights = {v.full_name for v in ours if not v.optimizer_state}
    assert weights == {w.path for w in model.weights}
    assert all(v.path and v.path.startswith("model/") for v in ours if not v.optimizer_state)


def test_meta_graph_read_without_tensorflow(tmp_path):
    """Our MetaGraphDef decoding against TF's: every node of the main graph and of the function
    bodies (TF 2's While loops), with op types, inputs and the Const values the cell readers
    use."""
    tf = tf_module()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [5, 2, I])
        tf.compat.v1.nn.dynamic_rnn(
            rci.LSTMCell(H, forget_bias=0.25, cell_clip=1.5), x, time_major=True, dtype=tf.float32
        )
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, str(tmp_path / "m"))
    meta = tf.compat.v1.MetaGraphDef()
    meta.ParseFromString((tmp_path / "m.meta").read_bytes())
    ours = read_meta_graph(str(tmp_path / "m.meta"))
    want = {n.name: n for n in meta.graph_def.node}
    for f in meta.graph_def.library.function:
        want.update({f"{f.signature.name}::{n.name}": n for n in f.node_def})
    got = {k: n for k, n in ours.nodes.items() if n.op != "_Arg"}
    assert set(got) == set(want)
    consts = 0
    for k, n in want.items():
        assert got[k].op == n.op
        assert len(got[k].inputs) == len([i for i in n.input if not i.startswith("^")])
        if n.op == "Const" and n.attr["value"].tensor.dtype == tf.float32.as_datatype_enum:
            np.testing.assert_array_equal(
                got[k].attrs["value"], tf.make_ndarray(n.attr["value"].tensor)
            )
            consts += 1
    assert consts > 5 and meta_graph_parts((tmp_path / "m.meta").read_bytes())[1] == tf.__version__
    cell = cell_at(ours, "rnn/lstm_cell", "lstm")
    assert cell.cls == "LSTMCell" and cell.attrs["forget_bias"] == 0.25
    assert cell.attrs["cell_clip"] == 1.5 and cell.attrs["activation"] == "tanh"


def _tf_frozen_weights(tf, graph_def) -> dict:
    """TF's reading of a frozen graph's weights: the main graph's floating-point Const nodes of
    rank >= 1 (scalars are an op's constants; a function body's constants are its ops')."""
    out = {}
    for n in graph_def.node:
        if n.op == "Const":
            value = tf.make_ndarray(n.attr["value"].tensor)
            if value.dtype.kind == "f" and value.ndim:
                out[n.name] = value
    return out


def test_a_tf2_frozen_function_is_refused_saying_why(tmp_path, capsys):
    """TF 2's convert_variables_to_constants_v2 (a Keras 3 LSTM's function, frozen) names each
    weight after the placeholder that held the captured variable, as TF's own freezing shows
    here: no layer can be told by its weights' names, and the refusal says so and what to
    convert instead."""
    tf = tf_module()
    keras = pytest.importorskip("keras")
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4)])
    fn = tf.function(lambda x: model(x)).get_concrete_function(tf.TensorSpec([2, 5, 3]))
    graph_def = convert_variables_to_constants_v2(fn).graph.as_graph_def()
    names = [
        n.name for n in graph_def.node if n.op == "Const" and n.attr["value"].tensor.dtype == 1
    ]
    assert any(n.endswith("/ReadVariableOp/resource") for n in names)
    assert not any(n.endswith(("/kernel", "/bias")) for n in names)
    path = tmp_path / "frozen.pb"
    path.write_bytes(graph_def.SerializeToString())
    assert cli.main(["convert", str(path), "-o", str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: a TF 2 function frozen by convert_variables_to_constants_v2" in err
    assert "convert the SavedModel, Keras file or checkpoint the function came from" in err


def test_frozen_graph_read_without_tensorflow(tmp_path):
    """Our frozen-GraphDef reading against TF's parse of the same files: the published cutkum
    graph (TF1 loops) and a TF2 graph whose While body holds float constants of its own. The
    weights are exactly the main graph's float Const nodes of rank >= 1, bit for bit; the file,
    its form and node count, and the producer version TF reads are what the source reports."""
    tf = tf_module()
    from tensorflow.core.framework import graph_pb2

    from torch_lstm_grad.porting.formats.frozen_graph import read_graph_def
    from torch_lstm_grad.porting.source import Writer

    g = tf.Graph()  # graph mode, TF 2's While (its body a library function)
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, I])
        w = tf.constant(_rand(I, I), name="w")

        def body(i, a):
            return i + 1, tf.tanh(a @ w + tf.constant(_rand(I), name="body_bias"))

        tf.identity(0.5 * tf.while_loop(lambda i, a: i < 3, body, (0, x))[1], name="out")
    made = g.as_graph_def()
    (tmp_path / "loop.pb").write_bytes(made.SerializeToString())
    for path in (str(tmp_path / "loop.pb"), CUTKUM):
        graph_def = graph_pb2.GraphDef()
        with open(path, "rb") as fh:
            graph_def.ParseFromString(fh.read())
        want = _tf_frozen_weights(tf, graph_def)
        scalars = [
            n.name
            for n in graph_def.node
            if n.op == "Const" and n.attr["value"].tensor.dtype == tf.float32.as_datatype_enum
            and not n.attr["value"].tensor.tensor_shape.dim
        ]  # fmt: skip
        assert want and scalars  # both kinds are in each file: the reading tells them apart
        source = read_graph_def(path)
        assert sorted(source.variables) == sorted(want)
        for name, value in want.items():
            _same_bits(source.variables[name], value)
        assert source.keys == {n: n for n in want}
        assert source.path == path
        assert source.format == (
            f"frozen GraphDef (binary, {len(graph_def.node)} nodes; weights from Const nodes)"
        )
        producer = graph_def.versions.producer  # cutkum's writer left it unset (0)
        assert producer > 0 or path == CUTKUM
        version = f" (graph version {producer})" if producer else ""
        assert source.writer == Writer("tf1", how=f"a frozen GraphDef{version}")
    body_consts = [n for f in made.library.function for n in f.node_def if n.op == "Const"]
    assert any(len(n.attr["value"].tensor.tensor_shape.dim) == 1 for n in body_consts)


def _node(name: bytes, op: bytes, *attrs: bytes) -> bytes:
    """A GraphDef's `node` field (NodeDef: name = 1, op = 2, attr = 5), by hand."""
    from test_fuzz_readers import _field

    return _field(1, 2, _field(1, 2, name) + _field(2, 2, op) + b"".join(attrs))


@pytest.mark.parametrize(
    "nodes, found",
    [
        ([(b"x y", b"Const")], "a node named 'x y' with op 'Const'"),
        ([(b"x", b"1Const")], "a node named 'x' with op '1Const'"),
        ([(b"ok", b"Const"), (b"", b"Const")], "a node named '' with op 'Const'"),
        ([], "no nodes"),
    ],
)
def test_frozen_graph_nodes_need_a_name_and_an_op(tmp_path, nodes, found):
    """A `.pb` whose nodes are not all named as TF names nodes and ops is no GraphDef: one line
    naming the file and the first bad node."""
    from torch_lstm_grad.porting.formats.frozen_graph import read_graph_def

    path = tmp_path / "g.pb"
    path.write_bytes(b"".join(_node(n, op) for n, op in nodes))
    with pytest.raises(ValueError) as err:
        read_graph_def(str(path))
    assert str(err.value) == f"{path}: not a GraphDef ({found})"


@pytest.mark.parametrize("reader", ["tensorflow", "tensorbundle"])
def test_checkpoint_damage_is_one_line_naming_the_file(tmp_path, reader):
    """A TF1 checkpoint whose data file lost its end, and one whose tensor bytes were changed
    (the index still right): each reader refuses in one line, the damaged file at the front (not
    "not a checkpoint"), a changed tensor named with the check that failed."""
    from torch_lstm_grad.porting.decoding.guard import CorruptFile

    prefix = _tf1_save(tmp_path / "c", {"v": _rand(16, 8)})
    data = tmp_path / "c.data-00000-of-00001"
    whole = data.read_bytes()
    data.write_bytes(whole[:-7])
    with pytest.raises(CorruptFile) as err:
        porting.read_variables(prefix, reader=reader)
    message = str(err.value)
    assert message.startswith(f"{prefix}.index: "), message  # the damaged file's index first
    assert "not a SavedModel" not in message and "\n" not in message
    data.write_bytes(whole[:-9] + bytes([whole[-9] ^ 1]) + whole[-8:])
    with pytest.raises(ValueError) as err:
        porting.read_variables(prefix, reader=reader)
    message = str(err.value)
    if reader == "tensorflow":  # TF's reader checks the crc32c as it reads the tensor
        assert message.startswith(f"{prefix}: tensor 'v' (OpError: "), message
        assert "Checksum does not match" in message
    else:
        want = f"{data}: the bytes of 'v' fail their checksum (crc32c)"
        assert message == want
    # A TF2 checkpoint whose object graph (a string tensor) was changed.
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    tf = tf_module()
    prefix = tf.train.Checkpoint(v=tf.Variable(_rand(4))).write(str(tmp_path / "o"))
    entry = TensorBundleReader(prefix).entries[OBJECT_GRAPH_KEY]
    data = tmp_path / "o.data-00000-of-00001"
    whole = bytearray(data.read_bytes())
    whole[entry.offset + entry.size // 2] ^= 1
    data.write_bytes(bytes(whole))
    with pytest.raises(ValueError) as err:
        porting.read_variables(prefix, reader=reader)
    message = str(err.value)
    if reader == "tensorflow":
        assert message.startswith(f"{prefix}: tensor '{OBJECT_GRAPH_KEY}' ("), message
    else:
        assert message.startswith(f"{data}: "), message
        assert OBJECT_GRAPH_KEY in message
    # A bundle TF wrote (SaveV2) whose object graph is no TrackableObjectGraph.
    prefix = str(tmp_path / "g")
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=[OBJECT_GRAPH_KEY, "w"],
        shape_and_slices=["", ""],
        tensors=[tf.constant(b"\x0a\x05ab"), tf.constant(_rand(3))],
    )
    with pytest.raises(ValueError) as err:
        porting.read_variables(prefix, reader=reader)
    assert str(err.value) == (
        f"{prefix}: the object graph ({OBJECT_GRAPH_KEY}): truncated length-delimited field "
        "(5 bytes, 2 left)"
    )


def test_frozen_graph_reading_a_missing_node_is_refused(tmp_path):
    """A GraphDef whose node reads a node it does not hold: the file and the format first."""
    from test_fuzz_readers import _field

    from torch_lstm_grad.porting.formats.frozen_graph import read_graph_def

    path = tmp_path / "g.pb"
    path.write_bytes(_node(b"a", b"Identity", _field(3, 2, b"missing")))
    with pytest.raises(ValueError) as err:
        read_graph_def(str(path))
    assert str(err.value) == (
        f"{path}: frozen GraphDef: node 'a' reads 'missing', which is not in the graph"
    )


def test_keras_version_strings_as_files_store_them():
    """The version strings Keras files store ("3.15.1", "2.2.4-tf" from tf.keras, "2.2"):
    missing parts are 0, "-tf" marks tf.keras; anything else is refused by name."""
    from torch_lstm_grad.porting.source import keras_version_tuple

    assert keras_version_tuple("3") == (3, 0, 0, False)
    assert keras_version_tuple("2.2") == (2, 2, 0, False)
    assert keras_version_tuple(" 2.2.4-tf ") == (2, 2, 4, True)
    assert keras_version_tuple("3.15.1") == (3, 15, 1, False)
    with pytest.raises(ValueError, match="keras_version: cannot read version 'x.1'"):
        keras_version_tuple("x.1")


@pytest.mark.parametrize("reader", ["tensorflow", "tensorbundle"])
def test_checkpoint_sources_account_for_every_tensor(tmp_path, reader):
    """What `read_checkpoint` hands on, against TF's own listing and object graph of the same
    files. TF1: the file and its format, the meta graph named when it is beside the prefix.
    TF2: variables sharing a full name are named by their object paths (a dotted one, which
    the checkpoint key escapes, among them), each with the key TF stored it under; every other
    tensor but the object graph itself is ignored with its reason."""
    tf = tf_module()
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    from torch_lstm_grad.porting.formats.checkpoint import read_checkpoint
    from torch_lstm_grad.porting.source import Writer

    prefix = _tf1_save(tmp_path / "c", {"a/w": _rand(2, 3)})
    source = read_checkpoint(prefix, reader)
    assert source.path == prefix
    assert source.format == "TF1 checkpoint (Saver) with its meta graph (c.meta)"
    assert source.writer == Writer("tf1", how="a TF1 Saver checkpoint")
    assert source.graph is not None and "a/w" in source.graph.nodes
    (tmp_path / "c.meta").unlink()
    assert read_checkpoint(prefix, reader).format == "TF1 checkpoint (Saver)"

    values = {"first.layer": _rand(2), "second": _rand(3)}
    ckpt = tf.train.Checkpoint(
        **{k: tf.Variable(v, name="w") for k, v in values.items()},
        steps=tf.Variable(3, dtype=tf.int64, name="steps"),
    )
    prefix = ckpt.write(str(tmp_path / "o"))
    theirs = trackable_object_graph_pb2.TrackableObjectGraph()
    theirs.ParseFromString(tf.train.load_checkpoint(prefix).get_tensor(OBJECT_GRAPH_KEY))
    key_of = {
        child.local_name: theirs.nodes[child.node_id].attributes[0].checkpoint_key
        for child in theirs.nodes[0].children
    }
    assert key_of["first.layer"] != "first.layer/.ATTRIBUTES/VARIABLE_VALUE"  # escaped
    listed = {name for name, _ in tf.train.list_variables(prefix)}
    assert listed == {OBJECT_GRAPH_KEY, *key_of.values()}
    source = read_checkpoint(prefix, reader)
    assert source.path == prefix
    assert source.format == "TF2 object checkpoint (object graph read)"
    assert source.writer == Writer("tf2", how="a TF2 object checkpoint")
    assert sorted(source.variables) == sorted(values)
    for name, value in values.items():
        _same_bits(source.variables[name], value)
    assert source.keys == {name: key_of[name] for name in values}
    assert source.ignored == {key_of["steps"]: "not a floating-point tensor"}


@pytest.mark.parametrize(
    "version, refusal",
    [
        (
            (1, 999, ()),
            "made for readers of version 999 or later; this one reads version 1, as TF's",
        ),
        ((1, 0, (1,)), "marks readers of version 1 (this one, TF's) bad"),
    ],
)
def test_tensorbundle_made_for_newer_readers_is_refused_as_tf_refuses_it(
    tmp_path, version, refusal
):
    """A bundle whose header's VersionDef TF's reader refuses (min_consumer above its format
    version 1, or version 1 listed as bad) is refused by the package's reader too, before
    TF's is reached; the same header with min_consumer 1 opens in both."""
    from test_fuzz_readers import _field, _sstable, _varint

    from torch_lstm_grad.porting.decoding.guard import CorruptFile
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    tf = tf_module()
    prefix = str(tmp_path / "v")

    def write(producer, min_consumer, bad):
        v = _field(1, 0, _varint(producer)) + _field(2, 0, _varint(min_consumer))
        v += b"".join(_field(3, 0, _varint(b)) for b in bad)
        header = _field(1, 0, _varint(1)) + _field(3, 2, v)
        (tmp_path / "v.index").write_bytes(_sstable([(b"", header)]))
        (tmp_path / "v.data-00000-of-00001").write_bytes(b"")

    write(*version)
    with pytest.raises(Exception, match="above current version|upgrade TensorFlow|bad"):
        tf.train.load_checkpoint(prefix)  # TF's own verdict on the file
    for reader in ("tensorflow", "tensorbundle"):
        with pytest.raises(CorruptFile) as err:
            porting.read_variables(prefix, reader=reader)
        assert str(err.value) == f"{prefix}.index: TensorBundle index: {refusal}"
    write(1, 1, ())
    tf.train.load_checkpoint(prefix)
    assert TensorBundleReader(prefix).entries == {}


def test_loop_variables_the_body_changes_are_not_traced_out_of_the_loop():
    """A While loop's body argument is traced to the loop's input only when the body returns it
    unchanged (TF passes a captured kernel so); one the body computes anew each step holds the
    input only at step 0, so reading it as the input (a kernel scaled by the loop, say) would
    port another computation. On the graph TF builds for such a loop."""
    tf = tf_module()
    from torch_lstm_grad.porting.graphs.graph_def import graph_from_graph_def

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, I], name="x")
        k = tf.constant(_rand(I, I), name="kernel")
        tf.while_loop(
            lambda i, a, changed, kept: i < 3,
            lambda i, a, changed, kept: (i + 1, a @ changed @ kept, changed * 0.5, kept),
            (0, x, k, tf.identity(k)),
            name="loop",
        )
    made = g.as_graph_def()
    (body,) = [f for f in made.library.function if "body" in f.signature.name]
    graph = graph_from_graph_def(made.SerializeToString(), label="graph")
    args = [f"{body.signature.name}::{a.name}" for a in body.signature.input_arg]
    # TF 2's While: the loop counter, maximum_iterations, then i, a, changed, kept
    assert len(args) == 6
    assert graph.resolve((args[5], 0)) == ("kernel", 0)  # kept: returned as it came
    assert graph.resolve((args[4], 0)) == (args[4], 0)  # changed * 0.5 each step
    assert graph.resolve((args[0], 0)) == (args[0], 0)  # the loop counter
    assert graph.resolve((args[1], 0))[0].startswith("loop/")  # maximum_iterations: outside


def test_object_graph_slot_variables_are_optimizer_state(tmp_path):
    """A TF1-style optimizer (tf.compat.v1.train.AdamOptimizer, run eagerly) lists its moments
    as the object graph's slot variables: those TF's proto names as slots, and its beta powers,
    are optimizer state; the model's variable is a weight under its own path."""
    tf = tf_module()
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    v = tf.Variable(_rand(3), name="w")
    opt = tf.compat.v1.train.AdamOptimizer(0.1)
    opt.minimize(lambda: tf.reduce_sum(v * v), var_list=[v])
    prefix = tf.train.Checkpoint(v=v, optimizer=opt).write(str(tmp_path / "c"))
    data = tf.train.load_checkpoint(prefix).get_tensor(OBJECT_GRAPH_KEY)
    theirs = trackable_object_graph_pb2.TrackableObjectGraph()
    theirs.ParseFromString(data)
    slots = {s.slot_variable_node_id for n in theirs.nodes for s in n.slot_variables}
    assert len(slots) == 2  # Adam's m and v
    ours = read_object_graph(data)
    state = {g.node for g in ours if g.optimizer_state}
    assert slots <= state
    assert [(g.full_name, g.path) for g in ours if not g.optimizer_state] == [("w", "v")]
    assert len(ours) == 5  # w, m, v, beta1_power, beta2_power


def test_object_graph_children_outside_the_graph_are_not_followed():
    """A hand-made object graph whose root names a child one past its last node (and one with
    a negative id): the edges are not followed, the root's own variable is still read."""
    from test_fuzz_readers import _field, _varint

    def ref(node_id: int, name: bytes) -> bytes:  # ObjectReference {node_id = 1, local_name = 2}
        return _field(1, 2, _field(1, 0, _varint(node_id)) + _field(2, 2, name))

    attr = _field(2, 2, _field(1, 2, b"VARIABLE_VALUE") + _field(2, 2, b"w") + _field(3, 2, b"k"))
    root = ref(1, b"past_the_end") + ref(-1, b"negative") + attr
    (only,) = read_object_graph(_field(1, 2, root))
    assert (only.checkpoint_key, only.full_name, only.path, only.node) == ("k", "w", "", 0)


def test_object_graph_paths_are_bounded_by_its_size():
    """A hand-made chain of 2,000 objects under 100-byte names (230 kB): its paths would total
    ~200 MB (each repeats its parents'); the reading stops at 16 bytes of path per byte of
    graph (plus 1 MiB) with one line instead of building them; a wide graph of 20,000 objects
    is read whole."""
    from test_fuzz_readers import _field, _varint

    name = b"n" * 100
    chain = b"".join(
        _field(1, 2, _field(1, 2, _field(1, 0, _varint(i + 1)) + _field(2, 2, name)))
        for i in range(1999)
    )
    data = chain + _field(1, 2, b"")
    assert 200_000 < len(data) < 250_000
    with pytest.raises(ValueError, match="^object graph: its paths are too long for its size$"):
        read_object_graph(data)
    assert (
        read_object_graph(
            _field(1, 2, _field(1, 2, _field(1, 0, _varint(1)) + _field(2, 2, name)))
            + _field(1, 2, b"")
        )
        == []
    )
    # A small graph is never refused: 300 objects nested under one-letter names (2.9 kB) have
    # 89 kB of paths, 31 times its size, inside the 1 MiB every graph is allowed.
    deep = b"".join(
        _field(1, 2, _field(1, 2, _field(1, 0, _varint(i + 1)) + _field(2, 2, b"n")))
        for i in range(299)
    )
    deep += _field(1, 2, b"")
    assert len(deep) < 3_000
    assert read_object_graph(deep) == []
    # A wide graph is read whole: 20,000 objects under the root, 2 MB of paths in 2.4 MB.
    wide = 20_000
    root = b"".join(
        _field(1, 2, _field(1, 0, _varint(i + 1)) + _field(2, 2, name + str(i).encode()))
        for i in range(wide)
    )
    leaf = _field(2, 2, _field(1, 2, b"VARIABLE_VALUE") + _field(2, 2, b"w") + _field(3, 2, b"k"))
    data = _field(1, 2, root) + _field(1, 2, leaf) * wide
    assert len(data) > 2_000_000
    found = read_object_graph(data)
    assert len(found) == wide and found[-1].path == name.decode() + str(wide - 1)


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


def test_saved_model_named_by_its_file(monkeypatch):
    """A SavedModel is named by its directory or its saved_model.pb, also as a bare file name in
    the directory it is in (the directory is then "."); any other file is not one."""
    from torch_lstm_grad.porting.formats.saved_model import saved_model_dir

    directory = os.path.join(os.path.dirname(__file__), "data", "keras2", "saved_model")
    assert saved_model_dir(directory) == directory
    assert saved_model_dir(os.path.join(directory, "saved_model.pb")) == directory
    monkeypatch.chdir(directory)
    assert saved_model_dir("saved_model.pb") == "."
    assert porting.read_source("saved_model.pb").variables.keys() == (
        porting.read_source(directory).variables.keys()
    )
    assert saved_model_dir("keras_metadata.pb") is None
    assert saved_model_dir("variables") is None


def test_varints_as_protobuf_writes_them():
    """The wire format's varints, written by Google's protobuf encoder: read back to the value
    and the position after them; every truncation, and an eleventh byte, refused."""
    encoder = pytest.importorskip("google.protobuf.internal.encoder")
    from torch_lstm_grad.porting.decoding import proto

    for value in (0, 1, 127, 128, 300, 2**32 - 1, 2**35 + 5, 2**63 - 1, 2**64 - 1):
        data = encoder._VarintBytes(value)
        assert proto.varint(b"\x07" + data + b"\x01", 1) == (value, 1 + len(data))
        for cut in range(len(data)):
            with pytest.raises(ValueError, match="^truncated varint$"):
                proto.varint(data[:cut], 0)
    with pytest.raises(ValueError, match="^varint longer than 10 bytes$"):
        proto.varint(b"\xff" * 10 + b"\x01", 0)


def test_fields_of_every_wire_type_as_protobuf_writes_them():
    """One field of each wire type the reader takes (varint, fixed64, length-delimited,
    fixed32), written by Google's protobuf (its well-known wrapper types): decoded to the value
    protobuf wrote, and every truncation of the message refused."""
    import struct

    wrappers = pytest.importorskip("google.protobuf.wrappers_pb2")
    from torch_lstm_grad.porting.decoding import proto

    def bits(fmt_from, fmt_to, value):
        return struct.unpack(fmt_to, struct.pack(fmt_from, value))[0]

    cases = [
        (wrappers.UInt64Value(value=2**40 + 3), 2**40 + 3),
        (wrappers.DoubleValue(value=-2.5), bits("<d", "<Q", -2.5)),
        (wrappers.BytesValue(value=b"\x00abc"), b"\x00abc"),
        (wrappers.FloatValue(value=1.25), bits("<f", "<I", 1.25)),
    ]
    for message, want in cases:
        data = message.SerializeToString()
        assert proto.fields(data) == {1: [want]}
        assert proto.fields(data + data) == {1: [want, want]}
        for cut in range(1, len(data)):
            with pytest.raises(ValueError, match="^truncated "):
                proto.fields(data[:cut])


def test_numbers_as_protobuf_reads_them():
    """int64 values at both bounds, and a number field given twice (two messages run together,
    which protobuf merges: the last value wins), written and read back by Google's protobuf:
    the reader reads the value protobuf reads."""
    wrappers = pytest.importorskip("google.protobuf.wrappers_pb2")
    from torch_lstm_grad.porting.decoding import proto

    values = (-(2**63), -1, 0, 1, 2**63 - 1)
    for value in values:
        data = wrappers.Int64Value(value=value).SerializeToString()
        assert proto.int64(proto.integer(proto.fields(data), 1)) == value
    for a, b in zip(values, values[::-1], strict=True):
        data = b"".join(wrappers.Int64Value(value=v).SerializeToString() for v in (a, b))
        want = wrappers.Int64Value.FromString(data).value
        assert proto.int64(proto.integer(proto.fields(data), 1)) == want == (b if b else a)
    data = b"".join(wrappers.FloatValue(value=v).SerializeToString() for v in (1.5, -2.25))
    got = proto.packed_floats([proto.last(proto.fields(data), 1, None)], "f")
    assert got == [wrappers.FloatValue.FromString(data).value] == [-2.25]


def test_a_number_of_the_wrong_wire_type_is_refused():
    """A number written with another number's wire type (a varint where a float or a fixed32
    belongs, a fixed-width value where a varint belongs): Google's protobuf keeps it as an
    unknown field and reads the field's default or earlier value in its place, so TF never sees
    it; the reader, which would have read it, refuses the file instead, naming the field."""
    wrappers = pytest.importorskip("google.protobuf.wrappers_pb2")
    tensor_pb2 = pytest.importorskip("tensorflow.core.framework.tensor_pb2")
    bundle_pb2 = pytest.importorskip("tensorflow.core.protobuf.tensor_bundle_pb2")
    from torch_lstm_grad.porting.decoding import proto
    from torch_lstm_grad.porting.formats import tensorbundle

    varint_5 = b"\x08\x05"  # field 1, wire type 0
    fixed32_5 = b"\x0d\x05\x00\x00\x00"  # field 1, wire type 5
    fixed64_5 = b"\x09\x05" + bytes(7)  # field 1, wire type 1
    assert wrappers.FloatValue.FromString(varint_5).value == 0.0
    with pytest.raises(ValueError, match=r"^a float written as a varint \(5\): wrong wire type$"):
        proto.packed_floats(proto.fields(varint_5)[1], "f")
    assert wrappers.DoubleValue.FromString(fixed32_5).value == 0.0
    with pytest.raises(ValueError, match=r"^a double written as a fixed32 \(5\)"):
        proto.packed_floats(proto.fields(fixed32_5)[1], "d")
    for data, wire in ((fixed32_5, "fixed32"), (fixed64_5, "fixed64")):
        assert wrappers.Int64Value.FromString(data).value == 0
        with pytest.raises(ValueError, match=f"^field 1: a {wire} where a varint belongs"):
            proto.integer(proto.fields(data), 1)
        with pytest.raises(ValueError, match=f"^a {wire} value 5 where a varint belongs"):
            proto.packed_varints(proto.fields(data)[1])

    # In TF's messages: a float constant's value as a varint (TF reads none: zeros) ...
    t = tensor_pb2.TensorProto(dtype=1)
    t.tensor_shape.dim.add(size=2)
    data = t.SerializeToString() + b"\x28\x05"  # float_val (5) as a varint
    assert list(tensor_pb2.TensorProto.FromString(data).float_val) == []
    assert proto.tensor_value(t.SerializeToString()).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="^a float written as a varint"):
        proto.tensor_value(data)
    # ... and a checkpoint entry's crc32c (fixed32) followed by a varint one: TF keeps the first
    data = bundle_pb2.BundleEntryProto(dtype=1, crc32c=7).SerializeToString() + b"\x30\x05"
    assert bundle_pb2.BundleEntryProto.FromString(data).crc32c == 7
    with pytest.raises(ValueError, match="^field 6: a varint where a fixed32 belongs"):
        tensorbundle._parse_entry(data)


def test_a_float_attr_of_the_wrong_wire_type_is_refused():
    """A node attribute's float (AttrValue.f, fixed32) written length-delimited or as a
    varint: protobuf skips it (the attribute holds no value), the meta graph reader refuses
    it; as protobuf writes it, it reads protobuf's value."""
    import struct

    attr_value_pb2 = pytest.importorskip("tensorflow.core.framework.attr_value_pb2")
    from torch_lstm_grad.porting.graphs import graph_def as tf1_graph

    data = attr_value_pb2.AttrValue(f=1.5).SerializeToString()
    assert tf1_graph._attr_value(data) == 1.5
    for data, wire in ((b"\x22\x04" + struct.pack("<f", 2.5), "bytes"), (b"\x20\x05", "a varint")):
        assert attr_value_pb2.AttrValue.FromString(data).WhichOneof("value") is None
        with pytest.raises(ValueError, match=f"^field 4: {wire} where a float belongs"):
            tf1_graph._attr_value(data)


def test_tensor_values_as_tensorflow_reads_them():
    """Constants of every dtype the reader takes (float, double, int32, int64, bool), stored
    as content bytes and as repeated values (one value filling the shape, as TF writes equal
    values), written by TF's make_tensor_proto: read as TF's make_ndarray reads them; a shape
    with an unknown dimension or rank is no constant's and is refused."""
    tf = pytest.importorskip("tensorflow")
    from tensorflow.core.framework import tensor_pb2

    from torch_lstm_grad.porting.decoding import proto

    rng = np.random.default_rng(5)
    values = [
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((3,)).astype(np.float64),
        rng.integers(-(2**31), 2**31 - 1, (2, 2), dtype=np.int32),
        rng.integers(-(2**63), 2**63 - 1, (3,), dtype=np.int64),
        np.array([True, False, True]),
    ]
    for value in values:
        for data in (
            tf.make_tensor_proto(value).SerializeToString(),  # tensor_content
            tf.make_tensor_proto(value.flat[0], value.dtype, value.shape).SerializeToString(),
        ):
            want = tf.make_ndarray(tensor_pb2.TensorProto.FromString(data))
            got = proto.tensor_value(data)
            assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
            np.testing.assert_array_equal(got, want)
    for dims, unknown_rank in (([2, -1], False), ([], True)):
        t = tensor_pb2.TensorProto(dtype=1, float_val=[1.0])
        t.tensor_shape.unknown_rank = unknown_rank
        for d in dims:
            t.tensor_shape.dim.add(size=d)
        with pytest.raises(ValueError, match="is not a constant's"):
            proto.tensor_value(t.SerializeToString())


def test_a_constant_filled_from_one_value_is_bounded():
    """TF stores a constant of equal values as one value and its shape (make_tensor_proto of a
    scalar with a shape, as TF writes it): filled up to proto.MAX_FILLED_BYTES (256 MiB, the
    bound included) as make_ndarray fills it; past it, from one value or none, refused by name
    before anything is allocated (a hostile graph's [2^40] Const would take 4 TiB)."""
    tf = pytest.importorskip("tensorflow")
    from tensorflow.core.framework import tensor_pb2

    from torch_lstm_grad.porting.decoding import proto

    assert proto.MAX_FILLED_BYTES == 1 << 28
    at_bound = [proto.MAX_FILLED_BYTES // 4]  # float32: exactly 256 MiB
    data = tf.make_tensor_proto(np.float32(1.5), tf.float32, at_bound).SerializeToString()
    assert len(data) < 32  # one value and the shape
    got = proto.tensor_value(data)
    want = tf.make_ndarray(tensor_pb2.TensorProto.FromString(data))
    assert got.shape == want.shape == tuple(at_bound) and got.dtype == want.dtype
    assert got[0] == got[-1] == want[-1] == 1.5
    del got, want
    for dtype, shape in ((tf.float32, [proto.MAX_FILLED_BYTES // 4 + 1]),
                         (tf.float64, [2, proto.MAX_FILLED_BYTES // 16 + 1]),
                         (tf.int32, [1 << 40])):  # fmt: skip
        data = tf.make_tensor_proto(1, dtype, shape).SerializeToString()
        with pytest.raises(ValueError, match=r"would fill \d+ bytes from 1 stored value"):
            proto.tensor_value(data)
    empty = tensor_pb2.TensorProto(dtype=1)  # no value at all: zeros, as make_ndarray fills
    empty.tensor_shape.dim.add(size=1 << 40)
    with pytest.raises(ValueError, match=r"would fill \d+ bytes from 0 stored value"):
        proto.tensor_value(empty.SerializeToString())


class _Unlisted(dict):
    """A class torch.load(weights_only=True) must refuse to construct."""


def test_library_messages_become_one_plain_line():
    """What a library raises is shown on one line, without terminal colours; for torch.load's
    weights-only refusal, the line saying what the file holds (not its advice on loading the
    file unsafely, which comes first)."""
    import io

    from torch_lstm_grad.porting.decoding import guard

    assert guard._first_line(RuntimeError("\x1b[1mbold\x1b[0m first \x1b[31;1mline\n2nd")) == (
        "bold first line"
    )
    assert guard._first_line(KeyError("key")) == "key"
    assert guard._first_line(OSError("x" * 400)) == "x" * 300
    assert guard._first_line(OSError("  \n ")) == ""
    long = "advice\n\tWeightsUnpickler error: " + "y" * 400 + ". Please do this"
    assert guard._first_line(RuntimeError(long)) == "y" * 300
    buf = io.BytesIO()
    torch.save(_Unlisted(a=1), buf)
    buf.seek(0)
    with pytest.raises(Exception) as err:
        torch.load(buf, weights_only=True)
    assert "\x1b[" in str(err.value)  # (torch's own message has colours)
    assert guard._first_line(err.value) == (
        f"Unsupported global: GLOBAL {__name__}._Unlisted was not an allowed global by default"
    )
