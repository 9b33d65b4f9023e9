"""Every reader of `torch-lstm-grad convert` (and `torch_lstm_grad.load`) fed seeded mutants of
valid files (harness/fuzz_readers.py, seeds in tests/data/fuzz_seeds/): each must end in a
clean refusal (exit 2, one line naming the file) or a conversion, never a traceback, a crash, a
hang or an allocation past 1 GiB, with TF's checkpoint reader and with the package's own.

The harness runs in a subprocess of its own: it forks a child per mutant from a process that
has imported TensorFlow but run nothing, which a pytest process that ran TF sessions is not.
A second test plants each bad outcome in a reader and checks the harness reports it, so the
first cannot pass by seeing nothing.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO_ROOT as ROOT
from tests.helpers import pb_field, pb_sstable, pb_varint, tf_available

HARNESS = os.path.join(ROOT, "harness", "fuzz_readers.py")
# per format and reader: about 40 s on one core (the long run: docs/porting.md, "Corrupt and
# hostile files")
MUTANTS = 12


def _tf_available() -> bool:

    return tf_available()


def _run(args, timeout):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def test_fuzz_every_reader(tmp_path):
    readers = "tensorflow,tensorbundle" if _tf_available() else "tensorbundle"
    out = tmp_path / "fuzz.json"
    proc = _run(
        [
            HARNESS,
            "--mutants",
            str(MUTANTS),
            "--seed",
            "1",
            "--timeout",
            "20",
            "--readers",
            readers,
            "--json",
            str(out),
        ],  # fmt: skip
        timeout=900,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    bad = [f"{b['format']}/{b['reader']} #{b['mutant']} ({b['mutation']}): {b['outcome']}: "
           f"{b['detail']}" for b in result["bad"]]  # fmt: skip
    assert not bad, "\n".join(bad)
    formats = {key.split("/")[0] for key in result["counts"]}
    assert formats == {
        "keras", "h5", "h5_tf_keras", "weights_h5", "tf2_ckpt", "tf1_ckpt", "saved_model",
        "saved_model_tf_keras", "frozen_pb", "pbtxt", "pt",
    }  # fmt: skip
    for key, counts in result["counts"].items():
        assert sum(counts.values()) == MUTANTS, key
        assert counts.get("refused", 0) > 0, f"{key}: no mutant was refused: {counts}"
    assert proc.returncode == 0, proc.stdout[-2000:]


# Each planted fault is a reader that misbehaves on every file; the harness must say so.
_PLANTED = textwrap.dedent(
    """
    import json, os, signal, sys, tempfile, time
    sys.path.insert(0, os.path.join(sys.argv[1], "harness"))
    import fuzz_readers as fz
    fz.prepare(tensorflow=False)
    from torch_lstm_grad.porting import convert as _convert_mod  # noqa: F401
    import torch_lstm_grad.porting.formats.keras_files as kf
    import torch_lstm_grad.porting.formats.tensorbundle as tb
    conv = sys.modules["torch_lstm_grad.porting.convert"]
    table = fz.formats()
    real_read_keras, real_digest = kf.read_keras, conv._digest

    def raises(path):
        raise KeyError("planted")

    def sleeps(path):
        time.sleep(60)

    def crashes(path):
        os.kill(os.getpid(), signal.SIGSEGV)

    def allocates(path):
        return bytearray(3 << 30)

    def unnamed(path):
        raise ValueError("planted, naming no file")

    plants = {"traceback": raises, "hang": sleeps, "crash": crashes, "memory": allocates}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        fmt = table["keras"]
        files = fz.seed_files(fmt, tmp, 20, fz.SEEDS)
        for want, plant in plants.items():
            conv.read_keras = plant
            fz._write_tree(tmp + "/m", files)
            out[want] = fz.run_one(fmt, tmp + "/m", "tensorbundle", 3).outcome
        conv.read_keras = real_read_keras
        # a checkpoint reader that raises inside the TF-free TensorBundle reader
        fmt = table["tf2_ckpt"]
        fz._write_tree(tmp + "/m", fz.seed_files(fmt, tmp, 20, fz.SEEDS))
        real_strings = tb.TensorBundleReader.get_strings
        tb.TensorBundleReader.get_strings = lambda self, name: [][0]
        out["traceback (tensorbundle)"] = fz.run_one(fmt, tmp + "/m", "tensorbundle", 20).outcome
        tb.TensorBundleReader.get_strings = real_strings
        # load(): a refusal naming no file, and a tampered file that the digest lets through
        fmt = table["pt"]
        files = fz.seed_files(fmt, tmp, 20, fz.SEEDS)
        fz._write_tree(tmp + "/m", files)
        expect = fz._tensors(tmp + "/m/model.pt")
        real_load = conv.load
        conv.load = unnamed
        sys.modules["torch_lstm_grad.porting"].load = unnamed
        out["unnamed"] = fz.run_one(fmt, tmp + "/m", "tensorbundle", 20, expect).outcome
        conv.load = sys.modules["torch_lstm_grad.porting"].load = real_load
        import torch
        data = torch.load(tmp + "/m/model.pt", weights_only=True)
        state = next(iter(data["modules"].values()))["state_dict"]
        first = next(iter(state))
        state[first] = state[first] + 1
        torch.save(data, tmp + "/m/model.pt")
        res = fz.run_one(fmt, tmp + "/m", "tensorbundle", 20, expect)
        out["refused (tampered .pt)"] = res.outcome
        conv._digest = lambda d: d.get("sha256")
        out["tampered"] = fz.run_one(fmt, tmp + "/m", "tensorbundle", 20, expect).outcome
        conv._digest = real_digest
    print(json.dumps(out))
    """
)


def test_harness_reports_each_bad_outcome():
    """A reader planted to raise KeyError, to sleep, to crash, to allocate 3 GiB, a load() that
    refuses without naming the file and a digest check that lets a changed tensor through are
    each reported as such (and a changed tensor with the real digest check is refused)."""
    proc = _run(["-c", _PLANTED, ROOT], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "traceback": "traceback",
        "hang": "hang",
        "crash": "crash",
        "memory": "memory",
        "traceback (tensorbundle)": "traceback",
        "unnamed": "unnamed",
        "refused (tampered .pt)": "refused",
        "tampered": "tampered",
    }


# -- hostile files, made by hand -------------------------------------------------------------------


def _hostile_cases(tmp) -> list[tuple[str, str, str]]:
    """(format, directory holding the files, a substring the refusal must hold)."""
    import io
    import shutil
    import zipfile

    from torch_lstm_grad.porting.formats.tensorbundle import read_table

    seeds = os.path.join(ROOT, "tests", "data", "fuzz_seeds")
    cases = []

    def case(fmt, seed, name, edit, why):
        d = os.path.join(tmp, f"{fmt}-{len(cases)}")
        shutil.copytree(os.path.join(seeds, seed), d)
        path = os.path.join(d, name)
        with open(path, "rb") as fh:
            data = fh.read()
        with open(path, "wb") as fh:
            fh.write(edit(data))
        cases.append((fmt, d, why))

    def zero_gcol(data):  # the global heap's first object zeroed: HDF5 loops for ever on it
        at = data.index(b"GCOL") + 16
        return data[:at] + bytes(64) + data[at + 64 :]

    def huge_continuation(data):  # an object header continuation 2^62 bytes long
        at = data.index(b"\x10\x00\x10\x00", 96) + 16
        return data[:at] + (1 << 62).to_bytes(8, "little") + data[at + 8 :]

    def vlen_kind(data):  # the backend attribute's string type made kind 5: h5py crashed on it
        at = data.index(b"backend\x00") + 9
        return data[:at] + b"\x05" + data[at + 1 :]

    case("h5", "h5", "model.h5", zero_gcol, "global heap collection")
    case("h5", "h5", "model.h5", vlen_kind, "variable-length type")
    case("weights_h5", "weights_h5", "model.weights.h5", huge_continuation, "continuation")

    def keras_config(config: bytes):
        def edit(data):
            src = zipfile.ZipFile(io.BytesIO(data))
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w") as z:
                for info in src.infolist():
                    body = config if info.filename == "config.json" else src.read(info)
                    z.writestr(info, body)
            return out.getvalue()

        return edit

    nested = '{"class_name": "Sequential", "config": {"layers": [%s]}}'
    deep = nested % ""
    for _ in range(200):
        deep = nested % deep
    case("keras", "keras", "model.keras", keras_config(deep.encode()), "nested more than 64")
    case("keras", "keras", "model.keras", keras_config(b"[" * 100000), "config.json")

    def bundle(edit_entry):
        def edit(data):
            path = os.path.join(tmp, "_index")
            with open(path, "wb") as fh:
                fh.write(data)
            entries = read_table(path)
            return pb_sstable([(k, edit_entry(k, v)) for k, v in entries])

        return edit

    # An entry whose shape has a negative dimension (TF's reader aborts on it: a CHECK), and one
    # that is no BundleEntryProto at all (wire type 7).
    def negative_dim(key, value):
        if key != b"model/_functional/_operations/4/cell/kernel/.ATTRIBUTES/VARIABLE_VALUE":
            return value
        dim = pb_field(2, 2, pb_field(1, 0, pb_varint(-1)))
        return pb_field(1, 0, pb_varint(1)) + pb_field(2, 2, dim) + pb_field(5, 0, pb_varint(0))

    def not_an_entry(key, value):
        return value if key == b"" else b"\x0f\xff\xff"

    case("tf2_ckpt", "tf2_ckpt", "ckpt.index", bundle(negative_dim), "shape [-1]")
    case("tf1_ckpt", "tf1_ckpt", "model.index", bundle(not_an_entry), "model.index")
    case("pbtxt", "pbtxt", "frozen.pbtxt", lambda d: b"node {" * 5000, "nested more than 100")

    def filled_constant(data):  # a Const of shape [2^40] holding one float: 4 TiB to fill
        shape = pb_field(2, 2, pb_field(1, 0, pb_varint(1 << 40)))
        tensor = pb_field(1, 0, pb_varint(1)) + pb_field(2, 2, shape) + pb_field(5, 5, b"\x00" * 4)
        attr = pb_field(1, 2, b"value") + pb_field(2, 2, pb_field(8, 2, tensor))
        node = pb_field(1, 2, b"big") + pb_field(2, 2, b"Const") + pb_field(5, 2, attr)
        return data + pb_field(1, 2, node)

    case("frozen_pb", "frozen_pb", "frozen.pb", filled_constant, "would fill")
    return cases


_HOSTILE = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.path.join(sys.argv[1], "harness"))
    import fuzz_readers as fz
    fz.prepare()
    table = fz.formats()
    out = []
    for fmt, d, reader in json.loads(sys.argv[2]):
        res = fz.run_one(table[fmt], d, reader, 60)
        out.append([res.outcome, res.detail])
    print(json.dumps(out))
    """
)


def test_hostile_files_are_refused(tmp_path):
    """Files made to hurt each reader (HDF5's endless loop, its allocation before its bounds
    check, an attribute type h5py crashes on, configs and text nested past Python's recursion
    limit, checkpoint entries that abort TF's reader, a constant filling 4 TiB from one value, a
    .pt whose tensor was changed) are each refused in one line naming the file and the check,
    by both checkpoint readers."""
    cases = _hostile_cases(str(tmp_path))
    runs = []
    for fmt, d, why in cases:
        readers = ["tensorbundle"] + (["tensorflow"] if _tf_available() else [])
        for reader in readers if "ckpt" in fmt else readers[:1]:
            runs.append((fmt, d, reader, why))
    # the .pt: a converted file with one tensor changed
    import torch

    from torch_lstm_grad import porting

    pt = tmp_path / "pt"
    pt.mkdir()
    porting.convert(
        os.path.join(ROOT, "tests", "data", "fuzz_seeds", "keras", "model.keras"),
        pt / "model.pt",
        log=lambda *a: None,
    )
    data = torch.load(pt / "model.pt", weights_only=True)
    state = next(iter(data["modules"].values()))["state_dict"]
    key = next(iter(state))
    state[key] = state[key] * 2
    torch.save(data, pt / "model.pt")
    runs.append(("pt", str(pt), "tensorbundle", "SHA-256 digest"))
    proc = _run(["-c", _HOSTILE, ROOT, json.dumps([r[:3] for r in runs])], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    wrong = [
        f"{fmt} ({reader}): {outcome}: {detail}"
        for (fmt, _, reader, why), (outcome, detail) in zip(runs, got, strict=True)
        if outcome != "refused" or why not in detail
    ]
    assert not wrong, "\n".join(wrong)


def test_config_values_of_any_type(tmp_path, capsys):
    """Every key of the .keras seed's LSTM and GRU configs set to a list or to a dict of the
    wrong shape (JSON a damaged or hostile config can hold): a conversion or a refusal, never
    an exception out of the describers."""
    import io
    import zipfile

    from torch_lstm_grad.tools import cli

    with zipfile.ZipFile(
        os.path.join(ROOT, "tests", "data", "fuzz_seeds", "keras", "model.keras")
    ) as z:
        members = {i.filename: z.read(i.filename) for i in z.infolist()}
    config = json.loads(members["config.json"])
    layers = config["config"]["layers"]
    src = tmp_path / "m.keras"
    for index, layer in enumerate(layers):
        if layer["class_name"] not in ("LSTM", "GRU"):
            continue
        for key in [*layer["config"], "unknown_key"]:
            for value in ([1], {"class_name": 5, "config": [1]}):
                changed = json.loads(json.dumps(config))
                changed["config"]["layers"][index]["config"][key] = value
                out = io.BytesIO()
                with zipfile.ZipFile(out, "w") as z:
                    for name, body in members.items():
                        z.writestr(name, json.dumps(changed) if name == "config.json" else body)
                src.write_bytes(out.getvalue())
                code = cli.main(["convert", str(src), "-o", str(tmp_path / "o.pt")])
                assert code in (0, 2), (layer["class_name"], key, value)
                capsys.readouterr()


def test_reading_names_library_errors_and_lets_ours_through():
    """guard.reading, the rule every reader's boundary follows: an error raised inside a named
    library becomes one CorruptFile line naming the file, what was read, the error's type and
    its first line (a KeyError's text unquoted); an error of the package's own code (a bug)
    passes through unchanged, as do ValueErrors that already name the file."""
    import io
    import zipfile

    from torch_lstm_grad.porting.decoding import guard

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("config.json", "{}")
    cases = [
        (lambda: zipfile.ZipFile(io.BytesIO(b"junk")), "(BadZipFile: File is not a zip file)"),
        (
            lambda: zipfile.ZipFile(buf).getinfo("weights.h5"),
            "(KeyError: There is no item named 'weights.h5' in the archive)",
        ),
        (lambda: json.loads("{"), "(JSONDecodeError: Expecting property name enclosed in double"),
    ]
    for call, found in cases:
        with pytest.raises(guard.CorruptFile) as err:
            with guard.reading("m.keras", "the Keras archive", ("zipfile", "json")):
                call()
        assert str(err.value).startswith(f"m.keras: the Keras archive {found}"), str(err.value)

    def ours():
        raise TypeError("a bug of the package")

    for libraries in ((), ("zipfile",), ("tensorflow", "h5py", "json")):
        with pytest.raises(TypeError, match="a bug of the package"):
            with guard.reading("m.keras", "the Keras archive", libraries):
                ours()
    with pytest.raises(ValueError) as err:
        with guard.reading("m.keras", "the Keras archive", ("zipfile",)):
            raise ValueError("m.keras: member 'config.json' is 3 bytes, not 2")
    assert type(err.value) is ValueError and str(err.value).startswith("m.keras: member")
    # What is not supported keeps its type and gets the file in front unless it names it; a
    # ValueError naming the file only past its first line gets it too; a path object is named.
    with pytest.raises(NotImplementedError) as err:
        with guard.reading(pathlib.Path("m.keras"), "the Keras archive"):
            raise NotImplementedError("float16 kernels")
    assert str(err.value) == "m.keras: the Keras archive: float16 kernels"
    with pytest.raises(NotImplementedError) as err:
        with guard.reading("m.keras", "the Keras archive"):
            raise NotImplementedError("m.keras: float16 kernels")
    assert str(err.value) == "m.keras: float16 kernels"
    with pytest.raises(guard.CorruptFile) as err:
        with guard.reading("m.keras", "the Keras archive"):
            raise ValueError("a negative size\nin m.keras")
    assert str(err.value) == "m.keras: the Keras archive: a negative size"
    with pytest.raises(guard.CorruptFile) as err:  # json's errors are the file's, named or not
        with guard.reading("m.keras", "the Keras archive"):
            json.loads("[1,")
    assert str(err.value).startswith("m.keras: the Keras archive (JSONDecodeError: Expecting")
