"""The Keras file reader (`porting/formats/keras_files.py`) against Keras itself: every weight Keras
holds in a model (nested models, a Bidirectional, a masking layer, the optimizer's state after
`fit`) comes out of each file Keras writes under the name Keras gives it and with its value;
and each bound the reader keeps on a hostile file (a dataset's or attribute's size against the
file's, a zip member's sizes against the archive's, a config's nesting) is refused one past
it and kept at it. Conversions of these files: test_porting_keras*.py.
"""

import json
import os
import re
import zipfile

import numpy as np
import pytest

from tests.helpers import DATA
from torch_lstm_grad.porting.formats import keras_files
from torch_lstm_grad.porting.formats.keras_files import is_keras_file, read_keras, read_keras_config

h5py = pytest.importorskip("h5py", reason="h5py (TensorFlow's dependency) is not installed")


def _keras():
    return pytest.importorskip("keras", reason="Keras (the oracle) is not installed")


def _distinct(model) -> None:
    """Every weight a different value, so a weight read under another's name shows."""
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.standard_normal(tuple(v.shape)).astype("float32"))


# Keras warns that the nested Sequential drops the Masking layer's mask: true, and beside the
# point in the tests of this model, which read its weights only.
_MASK_DROPPED = pytest.mark.filterwarnings("ignore:Layer 'inner' .* mask:UserWarning")


def _nested_keras3_model():
    keras = _keras()
    inp = keras.Input((5, 3))
    x = keras.layers.Masking()(inp)
    x = keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True))(x)
    inner = keras.Sequential(
        [keras.layers.GRU(3, return_sequences=True), keras.layers.Dense(2)], name="inner"
    )
    x = keras.layers.SimpleRNN(2)(inner(x))
    model = keras.Model(inp, x)
    model.compile("adam", "mse")
    model.fit(np.ones((4, 5, 3)), np.ones((4, 2)), verbose=0)  # the optimizer's state too
    _distinct(model)
    return model, inner.layers[1]


@_MASK_DROPPED
@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_keras3_files_hold_keras_weights_by_keras_names(tmp_path, suffix):
    """A cell's weights by Keras' own paths (`variable.path`); another layer's by its index in
    the layer's variables (Keras 3 stores no names for them); the optimizer's state left out."""
    model, dense = _nested_keras3_model()
    path = str(tmp_path / f"m{suffix}")
    model.save(path) if suffix == ".keras" else model.save_weights(path)
    want = {v.path: np.asarray(v) for v in model.weights if "_cell/" in v.path}
    owner = dense.weights[0].path.rsplit("/", 1)[0]  # "inner/dense_<n>": Keras numbers names
    want |= {f"{owner}/{i}": np.asarray(v) for i, v in enumerate(dense.weights)}
    got = read_keras(path).variables
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    source = read_keras(path)
    assert (source.writer.keras_major, bool(source.config_origin)) == (3, suffix == ".keras")


@_MASK_DROPPED
def test_keras3_model_s_own_variables(tmp_path):
    """A model's own variables (a subclassed model's `add_weight`: Keras 3.15 writes them as
    `vars/0`, ... in the root group) are read under the model's name (its `vars` group's
    name attribute, else "model") beside its layers' weights, which keep theirs."""
    model, _ = _nested_keras3_model()
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    layers = read_keras(path).variables
    own = np.arange(3, dtype=np.float32)
    with h5py.File(path, "r+") as f:
        f["vars"].create_dataset("0", data=own)
        name = f["vars"].attrs["name"]
    for owner in (name, "model"):
        got = read_keras(path).variables
        assert set(got) == set(layers) | {f"{owner}/0"}
        np.testing.assert_array_equal(got[f"{owner}/0"], own)
        with h5py.File(path, "r+") as f:
            f["vars"].attrs.pop("name", None)


def test_keras3_saveables_beside_the_layers_are_named_by_their_groups(tmp_path):
    """A subclassed model's other saveables sit at the root beside `layers` (a GAN's second
    optimizer: `d_optimizer/vars/<i>`, which Keras 3.15 writes as it writes `optimizer`): read
    under their `vars` group's name, else the group's own (stripped here from Keras' file)."""
    keras = _keras()

    class Gan(keras.Model):
        def __init__(self):
            super().__init__()
            self.rnn = keras.layers.LSTM(3)
            self.d_optimizer = keras.optimizers.Adam()

        def call(self, x):
            return self.rnn(x)

    model = Gan()
    model(np.ones((1, 4, 2), "float32"))
    model.d_optimizer.build(model.rnn.trainable_variables)
    path = str(tmp_path / "gan.weights.h5")
    model.save_weights(path)
    # Adam's float state: a learning rate, then two moments of each of the cell's 3 weights
    state = [v for v in model.d_optimizer.variables if v.dtype == "float32"]
    assert len(state) == 7
    # (Keras numbers names already taken in the process: lstm_5, adam_3)
    rnn = f"{model.rnn.name}/{model.rnn.cell.name}"
    cell = {f"{rnn}/{w}" for w in ("kernel", "recurrent_kernel", "bias")}
    for owner in (model.d_optimizer.name, "d_optimizer"):
        got = read_keras(path).variables
        assert set(got) == cell | {f"{owner}/{i}" for i in range(1, 8)}
        for i, v in enumerate(state, start=1):
            np.testing.assert_array_equal(got[f"{owner}/{i}"], v.numpy())
        with h5py.File(path, "r+") as f:
            assert f["d_optimizer/vars"].attrs.pop("name", None) in (model.d_optimizer.name, None)


@_MASK_DROPPED
def test_keras3_groups_without_names_are_named_by_their_groups(tmp_path):
    """Keras 3 names each `vars` group in a `name` attribute; where one is missing (stripped
    here from Keras' own file, with the empty `vars` of the layers a Bidirectional wraps) the
    group's name stands in: each layer by its group, a container of layers (`layers`) skipped, a
    cell's weights by their role."""
    model, _ = _nested_keras3_model()
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    groups, empty = [], []

    def strip(name, obj):  # visititems stops at a callback's first non-None return
        if name.endswith("/vars/0") and name.startswith("layers/"):  # not the optimizer's
            groups.append((name, len(obj.parent)))
        if name.endswith("vars"):
            obj.attrs.pop("name", None)
            if not len(obj) and name.startswith("layers/bidirectional/"):
                empty.append(name)

    with h5py.File(path, "r+") as f:
        f.visititems(strip)
        for name in empty:  # the wrapped layers' own vars (empty): gone too
            del f[name]
    want = set()
    for name, count in groups:  # count: the variables in that vars group
        parts = [p for p in name.split("/")[:-2] if p != "layers"]
        leaf = ("kernel", "recurrent_kernel", "bias") if parts[-1] == "cell" else None
        want |= {"/".join([*parts, leaf[i] if leaf else str(i)]) for i in range(count)}
    assert set(read_keras(path).variables) == want
    assert "sequential/dense/0" in want and "bidirectional/forward_layer/cell/kernel" in want


def test_legacy_h5_files_hold_tf_keras_weights_by_tf_keras_names(tmp_path):
    """tf_keras' whole-model `.h5` and `save_weights` `.h5`: every weight under its variable
    name (`name:0` without the `:0`). Without tf_keras (CI: the `test` extra does not install
    it), the files tf_keras 2.21 wrote in tests/data/keras2: every variable name, with the
    shape of the gradient tf_keras computed for it (expected.npz, `make_fixtures.py`)."""
    try:
        import tf_keras
    except ImportError:
        data = os.path.join(DATA, "keras2")
        grads = np.load(os.path.join(data, "expected.npz"))
        want = {
            k.removeprefix("model/d/"): grads[k].shape for k in grads if k.startswith("model/d/")
        }
        for name in ("model.h5", "weights.h5"):
            source = read_keras(os.path.join(data, name))
            assert {n: v.shape for n, v in source.variables.items()} == want, name
            assert source.writer.keras_version == "2.21.0"
        return
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Masking(input_shape=(5, 3)),
            tf_keras.layers.Bidirectional(tf_keras.layers.LSTM(4, return_sequences=True)),
            tf_keras.layers.GRU(3, return_sequences=True),
            tf_keras.layers.Dense(2),
        ]
    )
    _distinct(model)
    want = {v.name.removesuffix(":0"): v.numpy() for v in model.weights}
    for name, save in [("whole.h5", model.save), ("weights.h5", model.save_weights)]:
        save(str(tmp_path / name))
        source = read_keras(str(tmp_path / name))
        assert set(source.variables) == set(want), name
        for n, value in want.items():
            np.testing.assert_array_equal(source.variables[n], value, err_msg=n)
        assert source.writer.keras_version == tf_keras.__version__
        assert (source.layers is not None and bool(source.layers)) == (name == "whole.h5")


# -- bounds on hostile files ------------------------------------------------------------------


def _h5(tmp_path, fill) -> h5py.File:
    path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.h5"
    with h5py.File(path, "w") as f:
        fill(f)
    return h5py.File(path, "r")


def test_a_dataset_is_read_only_when_the_file_can_hold_it(tmp_path):
    """The bound is the file's size (times deflate's largest ratio, 1032, for a filtered
    dataset), checked on the shape before anything is allocated."""

    def fill(f):
        f["plain"] = np.ones((3, 5), "f4")  # 60 bytes
        f.create_dataset("zipped", data=np.zeros((64, 64), "f8"), compression="gzip")
        f["scalar"] = np.float32(2.5)
        f.create_dataset("null", data=h5py.Empty("f4"))
        f["ints"] = np.arange(3)
        f.create_group("group")

    with _h5(tmp_path, fill) as f:
        assert keras_files._float_array(f["plain"], 60).shape == (3, 5)
        with pytest.raises(ValueError, match=r"/plain: shape \(3, 5\) of float32 takes 60 bytes, "
                           r"more than the file holds \(59 bytes\)"):  # fmt: skip
            keras_files._float_array(f["plain"], 59)
        assert keras_files._float_array(f["zipped"], 32).shape == (64, 64)  # 32 * 1032 >= 32768
        with pytest.raises(ValueError, match="takes 32768 bytes"):
            keras_files._float_array(f["zipped"], 31)
        assert keras_files._float_array(f["scalar"], 4) == 2.5  # one element
        with pytest.raises(ValueError, match=r"shape \(\) of float32 takes 4 bytes"):
            keras_files._float_array(f["scalar"], 3)
        with pytest.raises(ValueError, match="/null: a null dataspace"):  # not h5py's TypeError
            keras_files._float_array(f["null"], 1 << 20)
        assert keras_files._float_array(f["ints"], 1) is None  # not a float: not a weight
        with pytest.raises(ValueError, match="/group: a Group where a weight's dataset belongs"):
            keras_files._float_array(f["group"], 1 << 20)


def test_a_file_is_walked_before_hdf5_opens_it(tmp_path):
    """A legacy .h5 read from its path, as a .keras archive's member is from its bytes: a
    structure HDF5 would loop on or allocate for without bound is refused, by name, first."""
    fixture = os.path.join(DATA, "keras2", "model.h5")
    with open(fixture, "rb") as fh:
        data = fh.read()
    at = data.index(b"SNOD")
    path = tmp_path / "model.h5"
    path.write_bytes(data[: at + 6] + (100).to_bytes(2, "little") + data[at + 8 :])
    with pytest.raises(ValueError, match=f"symbol table node at {at}: 100 entries, K is 4"):
        read_keras(str(path))
    archive = _zip(tmp_path, {"model.weights.h5": path.read_bytes()})
    with pytest.raises(ValueError, match=f"symbol table node at {at}: 100 entries, K is 4"):
        read_keras(archive)


def test_an_attribute_is_read_only_when_the_file_can_hold_it(tmp_path):
    def fill(f):
        f.attrs["names"] = np.array([b"ab", b"cd", b"ef"])  # 3 x 2 bytes
        f.attrs["version"] = "2.21.0"  # a variable-length string: 16 bytes a value in HDF5
        f.attrs["many"] = np.zeros(10, "f8")
        f.attrs["scalar"] = np.bytes_(b"x" * 20)  # shape (): one value of 20 bytes
        f.attrs["empty"] = h5py.Empty("S10")  # no shape at all: counted as one value

    with _h5(tmp_path, fill) as f:
        assert keras_files._attr(f, "names", 6).tolist() == [b"ab", b"cd", b"ef"]
        with pytest.raises(ValueError, match=r"attribute 'names' of /: shape \(3,\) exceeds"):
            keras_files._attr(f, "names", 5)
        assert keras_files._attr(f, "many", 80).shape == (10,)
        with pytest.raises(ValueError, match="attribute 'many'"):
            keras_files._attr(f, "many", 79)
        assert keras_files._attr(f, "version", 16) == "2.21.0"
        assert keras_files._attr(f, "absent", 0) is None
        for name, size in (("scalar", 20), ("empty", 10)):
            assert keras_files._attr(f, name, size) is not None
            with pytest.raises(ValueError, match=f"attribute '{name}' of /"):
                keras_files._attr(f, name, size - 1)


def test_an_attribute_of_no_bytes_a_value_is_refused_by_hdf5(tmp_path):
    """HDF5 refuses a datatype of size 0 as the attribute is looked up, before `_attr` would
    count its bytes; the reader names the file and HDF5's reason."""
    path = tmp_path / "m.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.attrs["keras_version"] = np.bytes_(b"2.21.0")  # HDF5 class 3 (string), 6 bytes
        f.attrs["layer_names"] = [b"l"]
        f.create_group("l").attrs["weight_names"] = np.zeros(0, "S1")
    data = bytearray(path.read_bytes())
    # A version-1 string datatype (0x13), its three bytes of bit fields, then its size (6)
    found = re.search(rb"\x13...\x06\x00\x00\x00", data, re.DOTALL)
    data[found.start() + 4] = 0
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{path}: .*invalid datatype size"):
        read_keras(str(path))


def _zip(tmp_path, members, compression=zipfile.ZIP_DEFLATED) -> str:
    path = tmp_path / f"z{len(list(tmp_path.iterdir()))}.keras"
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def test_zip_members_must_fit_the_archive(tmp_path):
    zeros = bytes(1 << 20)  # deflate's largest ratio: about 1030 to 1
    path = _zip(tmp_path, {"a.bin": zeros, "b.txt": b"stored"})
    size = len(open(path, "rb").read())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("a.bin")
        assert info.file_size <= 1032 * info.compress_size
        assert keras_files._zip_member(z, "a.bin", size) == zeros
        # The archive's size is the bound of a member's place (a member read past it would be
        # read from another file's bytes, or a hostile length).
        end = info.header_offset + info.compress_size
        keras_files._zip_member(z, "a.bin", end)
        with pytest.raises(ValueError, match=rf"zip member a.bin: {info.compress_size} bytes at "
                           rf"{info.header_offset} \(1048576 uncompressed\) do not fit the "
                           rf"archive \({end - 1} bytes\)"):  # fmt: skip
            keras_files._zip_member(z, "a.bin", end - 1)
        # A ratio past deflate's largest is a hostile size (a zip bomb's).
        info.file_size = 1032 * info.compress_size + 1
        with pytest.raises(ValueError, match="zip member a.bin"):
            keras_files._zip_member(z, "a.bin", size)
        info.file_size = 1032 * info.compress_size  # at the bound: read (as long as it is)
        assert keras_files._zip_member(z, "a.bin", size) == zeros
        # No compressed bytes inflate to none: a bound of 1032 times nothing.
        info.compress_size, info.file_size = 0, 1
        with pytest.raises(ValueError, match=r"zip member a.bin: 0 bytes at 0 \(1 uncompressed"):
            keras_files._zip_member(z, "a.bin", size)
    stored = _zip(tmp_path, {"s": b"12345"}, zipfile.ZIP_STORED)
    with zipfile.ZipFile(stored) as z:
        assert keras_files._zip_member(z, "s", 1 << 20) == b"12345"
        z.getinfo("s").file_size = 6  # a stored member is as long as its compressed bytes
        with pytest.raises(ValueError, match=r"zip member s: 5 bytes at 0 \(6 uncompressed\)"):
            keras_files._zip_member(z, "s", 1 << 20)


def test_json_documents_must_be_objects():
    assert keras_files._json(b'{"a": 1}', "x") == {"a": 1}
    with pytest.raises(ValueError, match=r"config.json: a JSON list, not an object"):
        keras_files._json(b"[1]", "config.json")
    with pytest.raises(ValueError, match=r"x: not JSON \(JSONDecodeError: "):
        keras_files._json(b"{", "x")
    with pytest.raises(ValueError, match=r"x: not JSON \(RecursionError: "):
        keras_files._json(b"[" * 100000 + b"]" * 100000, "x")


def _model(layers):
    return {"class_name": "Sequential", "config": {"name": "m", "layers": layers}}


def _layer(name, cls="Dense", **config):
    return {"class_name": cls, "config": {"name": name, **config}}


def test_models_nest_at_most_64_deep():
    cfg = _layer("leaf")
    for _ in range(64):
        cfg = _model([cfg])
    assert set(keras_files.layers_from_config(cfg)[0]) == {"leaf"}
    with pytest.raises(ValueError, match="models nested more than 64 deep"):
        keras_files.layers_from_config(_model([cfg]))


def test_config_entries_keras_would_not_write_are_refused():
    refusals = [
        (_model([[1]]), "a layer entry is a list, not an object"),
        (_model([{"class_name": "Dense", "config": [1]}]), "a layer's config is a list"),
        (_model([{"class_name": "Dense", "config": {}}]), "a 'Dense' layer without a name"),
        (_model([_layer(3)]), "a layer named 3 of class 'Dense'"),
        (_model([_layer("a", cls=4)]), "a layer named 'a' of class 4"),
        (_model([_layer("a"), _model([_layer("a")])]), "two layers named 'a'"),
        (_model([]), "a model whose config lists no layers"),
    ]
    for cfg, message in refusals:
        with pytest.raises(ValueError, match=message):
            keras_files.layers_from_config(cfg)
    # A subclassed model's get_config() (no layer list, no name) reads as no layers.
    assert keras_files.layers_from_config({"class_name": "M", "config": {"units": 3}}) == ({}, [])


def test_mask_producers_and_bidirectional_layers_as_keras_writes_them():
    """Against a config Keras 3 itself writes: Masking and Embedding(mask_zero) produce masks,
    the layer a mask reaches names its producer, a Bidirectional's wrapped layers are listed."""
    keras = _keras()
    inp = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(10, 3, mask_zero=True, name="emb")(inp)
    x = keras.layers.Bidirectional(keras.layers.LSTM(2, name="fw"), name="bi")(x)
    model = keras.Model(inp, x)
    layers, masks = keras_files.layers_from_config(json.loads(model.to_json()))
    assert masks == ["emb"]
    # Keras 3 names the op that computed the mask (not_equal_<n>), not the Embedding
    assert layers["bi"].mask_from.startswith("not_equal") and layers["emb"].mask_from is None
    assert layers["bi/layer"].name == "forward_fw" and layers["bi/layer"].class_name == "LSTM"
    assert layers["bi/backward_layer"].class_name == "LSTM"
    cfg = json.loads(model.to_json())
    (bi,) = [c for c in cfg["config"]["layers"] if c["config"]["name"] == "bi"]
    mask = bi["inbound_nodes"][0]["kwargs"]["mask"]["config"]
    for odd in ("not_equal", {"op": 1}, []):  # not the list Keras writes: the producer unknown
        mask["keras_history"] = odd
        assert keras_files.layers_from_config(cfg)[0]["bi"].mask_from == "?"
    no_mask = keras.layers.Embedding(10, 3, name="e2")
    cfg = _model([json.loads(json.dumps(keras.saving.serialize_keras_object(no_mask)))])
    assert keras_files.layers_from_config(cfg)[1] == []


def test_what_is_a_keras_file(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(8))
    (tmp_path / "archive.bin").write_bytes(open(_zip(tmp_path, {"a": b"1"}), "rb").read())
    (tmp_path / "text.bin").write_bytes(b"\x89HDF\r\n\x1a")  # one byte short of the signature
    for name in ("x.keras", "x.h5", "x.hdf5"):  # by its name: read_keras says what it is
        (tmp_path / name).write_bytes(b"")
        assert is_keras_file(str(tmp_path / name))
    assert is_keras_file(str(tmp_path / "weights.bin"))
    assert is_keras_file(str(tmp_path / "archive.bin"))
    assert not is_keras_file(str(tmp_path / "text.bin"))
    assert not is_keras_file(str(tmp_path))  # a directory (a SavedModel's) is not a file


def test_legacy_weight_names_must_be_a_list(tmp_path):
    """A legacy `.h5` layer's `weight_names` is a 1-D list of names (as Keras writes it); a
    single string, a table of them or an empty attribute (HDF5's null dataspace) is refused,
    naming the layer; a sound file's Source names its path."""
    for bad in ("kernel:0", np.array([[b"kernel:0"]]), h5py.Empty("S10")):
        path = tmp_path / "m.h5"
        with h5py.File(path, "w") as f:
            f.attrs["keras_version"], f.attrs["layer_names"] = "2.21.0", [b"l"]
            f.create_group("l").attrs["weight_names"] = bad
        with pytest.raises(ValueError, match="layer 'l': weight_names is not a list of names"):
            read_keras(str(path))
    for name in ("model.h5", "weights.h5"):
        path = os.path.join(DATA, "keras2", name)
        assert read_keras(path).path == path


def test_configs_given_on_their_own(tmp_path):
    """--config: a JSON file, a .keras archive's config.json (and its metadata's version), or a
    legacy .h5's model_config (and its keras_version)."""
    cfg = _model([_layer("d", units=2)])
    (tmp_path / "c.json").write_text(json.dumps({**cfg, "keras_version": "2.21.0"}))
    layers, masks, version = read_keras_config(str(tmp_path / "c.json"))
    assert set(layers) == {"d"} and masks == [] and version == "2.21.0"
    # json.dump(model.to_json(), f): the config's JSON text, itself a JSON string
    (tmp_path / "twice.json").write_text(json.dumps(json.dumps(cfg)))
    assert read_keras_config(str(tmp_path / "twice.json")) == (layers, [], None)
    meta = json.dumps({"keras_version": "3.15.1"})
    archive = _zip(tmp_path, {"config.json": json.dumps(cfg), "metadata.json": meta})
    assert read_keras_config(archive)[2] == "3.15.1"
    archive = _zip(tmp_path, {"config.json": json.dumps(cfg)})
    assert read_keras_config(archive)[2] is None
    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(cfg)
        f.attrs["keras_version"] = "2.21.0"
    assert read_keras_config(str(path))[2] == "2.21.0"
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "2.21.0"
    with pytest.raises(ValueError, match="an HDF5 file without model_config"):
        read_keras_config(str(path))
    garbage = tmp_path / "garbage.h5"  # what the libraries refuse is put after the file's name
    garbage.write_bytes(b"not HDF5, not JSON")
    for read, what in [(read_keras_config, "Keras model config"), (read_keras, "Keras file")]:
        with pytest.raises(ValueError) as refused:
            read(str(garbage))
        assert str(refused.value).startswith(f"{garbage}: {what} (")
    archive = _zip(tmp_path, {"config.json": json.dumps(cfg),
                              "metadata.json": json.dumps({"keras_version": 3})})  # fmt: skip
    with pytest.raises(ValueError, match="keras_version 3 is not a string"):
        read_keras_config(archive)


def test_legacy_h5_writer_from_the_file_or_its_weights_group(tmp_path):
    """tf_keras writes keras_version and backend on the file and on its model_weights group:
    either is the writer's. A backend other than TensorFlow (Keras 3 saving under JAX or
    Torch) is noted, not refused. A file with neither Keras layout is refused by name."""
    import shutil

    fixture = os.path.join(DATA, "keras2", "model.h5")
    path = tmp_path / "edited.h5"
    shutil.copy(fixture, path)
    with h5py.File(path, "r+") as f:
        for k in ("keras_version", "backend"):
            del f.attrs[k]  # the file's own: the group's are read
    source = read_keras(str(path))
    assert (source.writer.keras_version, source.writer.keras_major) == ("2.21.0", 2)
    assert source.writer.how == "keras_version attribute, backend tensorflow"
    with h5py.File(path, "r+") as f:
        f["model_weights"].attrs["backend"] = "jax"
    assert read_keras(str(path)).ignored["(backend)"] == "written with backend 'jax'"
    source = read_keras(fixture)
    assert source.writer.how == "keras_version attribute, backend tensorflow"
    assert "(backend)" not in source.ignored
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["x"] = np.zeros(2)
    with pytest.raises(ValueError, match="an HDF5 file, but neither Keras' legacy layout"):
        read_keras(str(tmp_path / "plain.h5"))


def test_keras_archives_name_their_writer_from_metadata_json(tmp_path):
    """A .keras archive's writer is metadata.json's keras_version (Keras 3 writes it); without
    one, the format says Keras 3; a version that is not a string is refused."""
    keras = _keras()
    model = keras.Sequential([keras.Input((3, 2)), keras.layers.LSTM(2)])
    path = str(tmp_path / "m.keras")
    model.save(path)
    source = read_keras(path)
    assert (source.writer.keras_version, source.writer.keras_major) == (keras.__version__, 3)
    assert source.writer.how == "metadata.json"
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    meta = json.loads(members["metadata.json"])
    for edit, version in [(None, None), ({}, None), ({"keras_version": "2.15.0"}, "2.15.0")]:
        edited = {k: v for k, v in members.items() if k != "metadata.json"}
        if edit is not None:
            edited["metadata.json"] = json.dumps({**meta, **edit}).encode()
            if not edit:
                edited["metadata.json"] = json.dumps({"date_saved": meta["date_saved"]}).encode()
        source = read_keras(_zip(tmp_path, edited))
        assert source.writer.keras_version == version
        assert source.writer.keras_major == (2 if version else 3)
        assert source.writer.how == (
            "metadata.json"
            if version
            else "the .keras format (Keras 3); metadata.json has no version"
        )
    bad = {**members, "metadata.json": json.dumps({**meta, "keras_version": 3}).encode()}
    with pytest.raises(ValueError, match="metadata.json: keras_version 3 is not a string"):
        read_keras(_zip(tmp_path, bad))


def test_a_cell_variable_past_the_three_of_keras_cells_is_named_by_its_index(tmp_path):
    """Keras 3's LSTM, GRU and SimpleRNN cells hold kernel, recurrent_kernel and bias, in
    that order; a fourth (a cell of another kind) keeps its index."""
    keras = _keras()
    model = keras.Sequential([keras.Input((3, 2)), keras.layers.LSTM(2, name="lstm")])
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    with h5py.File(path, "r+") as f:
        f["layers/lstm/cell/vars/3"] = np.ones(2, "float32")
    got = read_keras(path).variables
    assert sorted(got) == [
        f"lstm/lstm_cell/{leaf}" for leaf in ("3", "bias", "kernel", "recurrent_kernel")
    ]
