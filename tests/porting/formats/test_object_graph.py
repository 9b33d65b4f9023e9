"""The TF2 object graph read without TensorFlow (`porting/formats/object_graph.py`) against TF's
protobuf classes: a Keras model's checkpoint with its optimizer, slot variables as optimizer
state, and hand-made graphs whose edges leave the graph or whose paths would outgrow it."""

import numpy as np
import pytest

from tests.helpers import counted_rand, needs_tf, pb_field, pb_varint, tf_module
from torch_lstm_grad.porting.formats.object_graph import OBJECT_GRAPH_KEY, read_object_graph

I, H = 3, 4  # noqa: E741


@needs_tf
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


@needs_tf
def test_object_graph_slot_variables_are_optimizer_state(tmp_path):
    """A TF1-style optimizer (tf.compat.v1.train.AdamOptimizer, run eagerly) lists its moments
    as the object graph's slot variables: those TF's proto names as slots, and its beta powers,
    are optimizer state; the model's variable is a weight under its own path."""
    tf = tf_module()
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    v = tf.Variable(counted_rand(3), name="w")
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


@needs_tf
def test_object_graph_children_outside_the_graph_are_not_followed():
    """A hand-made object graph whose root names a child one past its last node (and one with
    a negative id): the edges are not followed, the root's own variable is still read."""

    def ref(node_id: int, name: bytes) -> bytes:  # ObjectReference {node_id = 1, local_name = 2}
        return pb_field(1, 2, pb_field(1, 0, pb_varint(node_id)) + pb_field(2, 2, name))

    attr = pb_field(2, 2, pb_field(1, 2, b"VARIABLE_VALUE") + pb_field(2, 2, b"w")
                    + pb_field(3, 2, b"k"))  # fmt: skip
    root = ref(1, b"past_the_end") + ref(-1, b"negative") + attr
    (only,) = read_object_graph(pb_field(1, 2, root))
    assert (only.checkpoint_key, only.full_name, only.path, only.node) == ("k", "w", "", 0)


@needs_tf
def test_object_graph_paths_are_bounded_by_its_size():
    """A hand-made chain of 2,000 objects under 100-byte names (230 kB): its paths would total
    ~200 MB (each repeats its parents'); the reading stops at 16 bytes of path per byte of
    graph (plus 1 MiB) with one line instead of building them; a wide graph of 20,000 objects
    is read whole."""

    name = b"n" * 100
    chain = b"".join(
        pb_field(1, 2, pb_field(1, 2, pb_field(1, 0, pb_varint(i + 1)) + pb_field(2, 2, name)))
        for i in range(1999)
    )
    data = chain + pb_field(1, 2, b"")
    assert 200_000 < len(data) < 250_000
    with pytest.raises(ValueError, match="^object graph: its paths are too long for its size$"):
        read_object_graph(data)
    assert (
        read_object_graph(
            pb_field(1, 2, pb_field(1, 2, pb_field(1, 0, pb_varint(1)) + pb_field(2, 2, name)))
            + pb_field(1, 2, b"")
        )
        == []
    )
    # A small graph is never refused: 300 objects nested under one-letter names (2.9 kB) have
    # 89 kB of paths, 31 times its size, inside the 1 MiB every graph is allowed.
    deep = b"".join(
        pb_field(1, 2, pb_field(1, 2, pb_field(1, 0, pb_varint(i + 1)) + pb_field(2, 2, b"n")))
        for i in range(299)
    )
    deep += pb_field(1, 2, b"")
    assert len(deep) < 3_000
    assert read_object_graph(deep) == []
    # A wide graph is read whole: 20,000 objects under the root, 2 MB of paths in 2.4 MB.
    wide = 20_000
    root = b"".join(
        pb_field(1, 2, pb_field(1, 0, pb_varint(i + 1)) + pb_field(2, 2, name + str(i).encode()))
        for i in range(wide)
    )
    leaf = pb_field(2, 2, pb_field(1, 2, b"VARIABLE_VALUE") + pb_field(2, 2, b"w")
                    + pb_field(3, 2, b"k"))  # fmt: skip
    data = pb_field(1, 2, root) + pb_field(1, 2, leaf) * wide
    assert len(data) > 2_000_000
    found = read_object_graph(data)
    assert len(found) == wide and found[-1].path == name.decode() + str(wide - 1)
