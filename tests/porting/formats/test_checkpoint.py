"""The checkpoint readers (`porting/formats/checkpoint.py`) on TF1 and TF2 checkpoints TF wrote:
what `read_checkpoint` hands on against TF's own listing and object graph, damage refused in one
line naming the file, and `convert` through the TF-free reader (forced, or chosen when TensorFlow
cannot be imported) writing the same modules as through TF."""

import numpy as np
import pytest
import torch

from tests.helpers import counted_rand, needs_tf, same_bits, tf1_save, tf_module
from torch_lstm_grad import porting
from torch_lstm_grad.porting.formats.object_graph import OBJECT_GRAPH_KEY
from torch_lstm_grad.tools import cli

I, H = 3, 4  # noqa: E741


def _convert(src, out, capsys, *extra):
    assert cli.main(["convert", str(src), "-o", str(out), *extra]) == 0, capsys.readouterr()
    return porting.load(out), capsys.readouterr().out


@needs_tf
def test_tensorbundle_convert_without_tensorflow(tmp_path, capsys, monkeypatch):
    """`convert` through the TF-free reader (forced by the environment variable, and chosen by
    "auto" when `import tensorflow` fails) writes the same modules as through TF."""
    p = "cudnn_lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/"
    values = {
        "rnn/lstm_cell/kernel": counted_rand(I + H, 4 * H),
        "rnn/lstm_cell/bias": counted_rand(4 * H),
        p + "kernel": counted_rand(I + H, 4 * H),
        p + "bias": counted_rand(4 * H),
        "global_step": np.int64(5),
    }
    tf1_save(tmp_path / "m", values)
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


@needs_tf
@pytest.mark.parametrize("reader", ["tensorflow", "tensorbundle"])
def test_checkpoint_damage_is_one_line_naming_the_file(tmp_path, reader):
    """A TF1 checkpoint whose data file lost its end, and one whose tensor bytes were changed
    (the index still right): each reader refuses in one line, the damaged file at the front (not
    "not a checkpoint"), a changed tensor named with the check that failed."""
    from torch_lstm_grad.porting.decoding.guard import CorruptFile

    prefix = tf1_save(tmp_path / "c", {"v": counted_rand(16, 8)})
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
    prefix = tf.train.Checkpoint(v=tf.Variable(counted_rand(4))).write(str(tmp_path / "o"))
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
        tensors=[tf.constant(b"\x0a\x05ab"), tf.constant(counted_rand(3))],
    )
    with pytest.raises(ValueError) as err:
        porting.read_variables(prefix, reader=reader)
    assert str(err.value) == (
        f"{prefix}: the object graph ({OBJECT_GRAPH_KEY}): truncated length-delimited field "
        "(5 bytes, 2 left)"
    )


@needs_tf
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

    prefix = tf1_save(tmp_path / "c", {"a/w": counted_rand(2, 3)})
    source = read_checkpoint(prefix, reader)
    assert source.path == prefix
    assert source.format == "TF1 checkpoint (Saver) with its meta graph (c.meta)"
    assert source.writer == Writer("tf1", how="a TF1 Saver checkpoint")
    assert source.graph is not None and "a/w" in source.graph.nodes
    (tmp_path / "c.meta").unlink()
    assert read_checkpoint(prefix, reader).format == "TF1 checkpoint (Saver)"

    values = {"first.layer": counted_rand(2), "second": counted_rand(3)}
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
        same_bits(source.variables[name], value)
    assert source.keys == {name: key_of[name] for name in values}
    assert source.ignored == {key_of["steps"]: "not a floating-point tensor"}
