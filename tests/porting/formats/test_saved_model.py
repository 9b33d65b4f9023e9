"""How a TF2 SavedModel's variables are named and tied to its saved functions
(porting/formats/saved_model.py: `_tf2_variables`, `_link_variables`), and the refusals of a
SavedModel whose object graph is missing or corrupt.

The checkpoints here are written by TF itself (`tf.raw_ops.SaveV2`, the op `tf.train.Checkpoint`
saves with) with an object graph built by TF's own protobuf class, so each rule is exercised on
exactly the case it exists for: a variable saved twice (Keras 3 exports keep a copy under
`_all_variables`), two different variables under one name, a variable TF stored no name for.

And a SavedModel named by its directory or its saved_model.pb."""

import os
import shutil

import numpy as np
import pytest

from tests.helpers import DATA, KERAS2, edited_saved_model, needs_tf, tf_module
from torch_lstm_grad import porting
from torch_lstm_grad.porting.decoding import guard
from torch_lstm_grad.porting.formats.object_graph import OBJECT_GRAPH_KEY
from torch_lstm_grad.porting.formats.saved_model import (
    SavedObjects,
    _link_variables,
    _tf2_variables,
)
from torch_lstm_grad.porting.graphs.graph_def import Graph

pytestmark = needs_tf
K2 = os.path.join(KERAS2, "saved_model")


def _key(local: str) -> str:
    return f"{local}/.ATTRIBUTES/VARIABLE_VALUE"


def _write_checkpoint(prefix, variables, object_graph=None):
    """A checkpoint at `prefix` written by TF's SaveV2: `variables` is [(local name under the
    root, full_name, value)], each a child of the root holding one VARIABLE_VALUE; the object
    graph is theirs unless `object_graph` (bytes) replaces it."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    tf = tf_module()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    root = graph.nodes.add()
    for i, (local, full_name, _) in enumerate(variables, start=1):
        root.children.add(node_id=i, local_name=local)
        node = graph.nodes.add()
        node.attributes.add(name="VARIABLE_VALUE", full_name=full_name, checkpoint_key=_key(local))
    names = [OBJECT_GRAPH_KEY] + [_key(local) for local, _, _ in variables]
    tensors = [tf.constant(graph.SerializeToString() if object_graph is None else object_graph)]
    tensors += [tf.constant(value) for _, _, value in variables]
    tf.raw_ops.SaveV2(
        prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors
    )
    return str(prefix)


W = np.arange(6, dtype=np.float32).reshape(2, 3)
V3, V4 = np.full(4, 3.0, np.float32), np.full(4, 4.0, np.float32)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Nodes 1-2: one variable saved twice (equal values), only node 2 captured by a function;
    nodes 3-4: two captured variables SavedModel names alike ("v", different values); node 5: no
    SavedVariable name; node 6: no name anywhere; node 7: an integer."""
    prefix = tmp_path_factory.mktemp("ckpt") / "variables"
    return _write_checkpoint(prefix, [
        ("copy", "w", W), ("w_layer", "w", W.copy()),
        ("first", "v_b", V3), ("second", "v_a", V4),
        ("unnamed", "x/y", np.ones(2, np.float32)),
        ("anonymous", "", np.zeros(3, np.float32)),
        ("seed", "seed", np.array([1, 2], np.int64)),
    ])  # fmt: skip


def _objects():
    return SavedObjects(
        variable_names={1: "w", 2: "w", 3: "v", 4: "v", 7: "seed"},
        bound_inputs={"f": [2, 3], "g": [4]},
    )


@pytest.mark.parametrize("reader", ["tensorbundle", "tensorflow"])
def test_which_copy_keeps_a_variables_name(checkpoint, reader):
    """The copy a saved function captures keeps the name (its node is what the functions read);
    an equal copy is listed as left out; a different variable under a taken name goes by its
    path in the object graph; a name the SavedModel does not store is the checkpoint's
    full_name, else the path; a non-float tensor is left out."""
    variables, keys, ignored, by_name = _tf2_variables(checkpoint, reader, _objects())
    assert keys == {
        "w": _key("w_layer"), "v": _key("first"), "second": _key("second"),
        "x/y": _key("unnamed"), "anonymous": _key("anonymous"),
    }  # fmt: skip
    assert by_name == {"w": 2, "v": 3, "second": 4, "x/y": 5, "anonymous": 6}
    assert ignored == {
        _key("copy"): "another copy of w (the same values)",
        _key("seed"): "not a floating-point tensor",
    }
    for name, want in [("w", W), ("v", V3), ("second", V4)]:
        assert np.array_equal(variables[name], want), name
    assert variables["x/y"].shape == (2,) and variables["anonymous"].shape == (3,)


def test_equal_shape_other_values_is_not_a_copy(tmp_path):
    """Two variables under one name are one only when shape and every byte agree: equal shape
    and other values, or equal bytes in another shape, are two variables."""
    prefix = _write_checkpoint(tmp_path / "variables", [
        ("a", "a", np.zeros((2, 2), np.float32)), ("b", "b", np.ones((2, 2), np.float32)),
        ("c", "c", np.zeros(4, np.float32)),
    ])  # fmt: skip
    objects = SavedObjects(variable_names={1: "k", 2: "k", 3: "k"})
    variables, keys, ignored, _ = _tf2_variables(prefix, "tensorbundle", objects)
    assert keys == {"k": _key("a"), "b": _key("b"), "c": _key("c")} and ignored == {}
    assert variables["b"].tolist() == [[1, 1], [1, 1]] and variables["c"].shape == (4,)


def test_captured_variables_link_to_the_functions_last_arguments():
    """A function's captured objects are its last arguments, in order: each variable's alias is
    the argument that receives it. A function with no other arguments links all of them; one
    whose captures outnumber its arguments, or that the graph does not hold, links none."""
    graph = Graph({})
    graph.functions = {"f": ["f::x", "f::w", "f::v"], "g": ["g::w"], "h": ["h::a"]}
    objects = SavedObjects(bound_inputs={"f": [2, 3], "g": [2], "h": [2, 3], "gone": [3]})
    _link_variables(graph, objects, {"w": 2, "v": 3})
    assert graph.aliases == {"w": ["f::w", "g::w"], "v": ["f::v"]}


def test_a_tf2_saved_model_without_its_object_graph_is_refused(tmp_path):
    dst = edited_saved_model(K2, tmp_path / "sm", lambda meta: meta.ClearField("object_graph_def"))
    with pytest.raises(ValueError, match="a TF2 SavedModel .object-based variables. without an "
                       "object graph"):  # fmt: skip
        porting.read_source(dst, reader="tensorbundle")


@pytest.mark.parametrize("reader", ["tensorbundle", "tensorflow"])
def test_a_corrupt_object_graph_in_the_variables_is_named(tmp_path, reader):
    """The variables' own object graph (a checkpoint tensor) that is not a TrackableObjectGraph:
    a CorruptFile naming the variables prefix and the tensor."""
    dst = tmp_path / "sm"
    shutil.copytree(K2, dst)
    prefix = dst / "variables" / "variables"
    for f in (dst / "variables").iterdir():
        f.unlink()
    _write_checkpoint(prefix, [("x", "x", W)], object_graph=b"\x0a\xff\xff\xff")
    with pytest.raises(guard.CorruptFile) as err:
        porting.read_source(dst, reader=reader)
    assert str(err.value).startswith(f"{prefix}: the object graph ({OBJECT_GRAPH_KEY}): "), err


def test_saved_model_named_by_its_file(monkeypatch):
    """A SavedModel is named by its directory or its saved_model.pb, also as a bare file name in
    the directory it is in (the directory is then "."); any other file is not one."""
    from torch_lstm_grad.porting.formats.saved_model import saved_model_dir

    directory = os.path.join(DATA, "keras2", "saved_model")
    assert saved_model_dir(directory) == directory
    assert saved_model_dir(os.path.join(directory, "saved_model.pb")) == directory
    monkeypatch.chdir(directory)
    assert saved_model_dir("saved_model.pb") == "."
    assert porting.read_source("saved_model.pb").variables.keys() == (
        porting.read_source(directory).variables.keys()
    )
    assert saved_model_dir("keras_metadata.pb") is None
    assert saved_model_dir("variables") is None
