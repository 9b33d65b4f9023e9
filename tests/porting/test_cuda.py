"""Ports on the GPU against TensorFlow's own numbers: tf_keras 2.21's files (tests/data/keras2; the
outputs and gradients tf_keras computed from them are stored beside them, so no TensorFlow is
needed where this runs), converted as a user would, moved to CUDA, and compared with tf_keras to
the porting tests' tolerance — training (outputs, input and weight gradients) and no_grad
inference, which run different ops. tests/modules/test_modules_cuda.py ties each module's GPU run
to its CPU run; this ties what a converted file computes on the GPU to what TF computed. Skipped,
with the reason printed, without a GPU or a CUDA build of the extension. TF32 is off. Also a
published frozen TF1 graph (cutkum's three GRUCells, tests/data/cutkum) against TF's run of it."""

import os

import numpy as np
import pytest
import torch

from tests.helpers import (
    CUDA_OK,
    CUDA_SKIP,
    DATA,
    KERAS2,
    assert_close,
    compare_with_stored_keras2,
    step_cells,
)
from torch_lstm_grad import porting
from torch_lstm_grad.tools import cli

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP),
    pytest.mark.usefixtures("no_tf32"),
]

ORDER = ["lstm", "gru_before", "gru_after", "rnn", "bi"]  # model.h5's layers

# name -> (file, convert's options, stored numbers' prefix, layers in order, masked, last only)
CASES = {
    # LSTM, GRU (reset before and after), SimpleRNN, Bidirectional; a mask with holes
    "model.h5": ("model.h5", [], "model", ORDER, True, False),
    # the same model from a TF-format checkpoint; the layers' config from model.json
    "ckpt": ("ckpt", ["--config", "model.json"], "model", ORDER, True, False),
    # a SavedModel: LSTM(hard_sigmoid) -> GRU(reset_after=False)
    "saved_model": ("saved_model", [], "savedmodel", ["lstm", "gru"], False, True),
    # a subclassed model's SavedModel: Bidirectional(LSTM) -> backwards GRU
    "saved_model_subclassed": (
        "saved_model_subclassed",
        [],
        "subclassed",
        ["bi", "gru"],
        False,
        True,
    ),
    # CuDNNLSTM / CuDNNGRU: cuDNN's own weight layout
    "cudnn.h5": ("cudnn.h5", [], "cudnn", ["clstm", "cgru"], False, False),
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each case's file converted once (on the CPU, as `convert` always runs), loaded again."""
    done = {}

    def get(case):
        if case not in done:
            src, options, *_ = CASES[case]
            out = tmp_path_factory.mktemp("ports") / "out.pt"
            options = [os.path.join(KERAS2, o) if o.endswith(".json") else o for o in options]
            assert cli.main(["convert", os.path.join(KERAS2, src), "-o", str(out),
                             *options]) == 0  # fmt: skip
            done[case] = out
        return porting.load(done[case])

    return get


@pytest.mark.parametrize("train", [True, False], ids=["train", "no_grad"])
@pytest.mark.parametrize("case", list(CASES))
def test_converted_file_on_the_gpu_matches_tf_keras(case, train, converted):
    _, _, prefix, names, mask, last_only = CASES[case]
    mods = {name: module.to("cuda") for name, module in converted(case).items()}
    assert all(p.is_cuda for m in mods.values() for p in m.parameters())
    compare_with_stored_keras2(mods, prefix, names, mask=mask, last_only=last_only,
                               device="cuda", train=train)  # fmt: skip


CUTKUM = os.path.join(DATA, "cutkum")


def test_published_frozen_graph_on_the_gpu_matches_tf(tmp_path):
    """cutkum's frozen graph converted, its three GRUCells on the GPU, stepped as dynamic_rnn
    steps them from the stored initial states, against TF's outputs on the same inputs
    (make_expected.py; tests/porting/test_tf1.py checks them against TF where TF runs). TF
    cannot differentiate this imported TF1 loop: outputs only."""
    out = tmp_path / "cutkum.pt"
    assert cli.main(["convert", os.path.join(CUTKUM, "frozen_model.pb"), "-o", str(out)]) == 0
    mods = porting.load(out)
    cells = [mods[f"rnn.multi_rnn_cell.cell_{k}.gru_cell"].to("cuda") for k in range(3)]
    e = np.load(os.path.join(CUTKUM, "expected.npz"))
    h0 = torch.from_numpy(e["state"][0]).cuda()
    initial = [h0[:, :512], h0[:, 512:768], h0[:, 768:]]
    with torch.no_grad():
        outs, _ = step_cells(cells, torch.from_numpy(e["x"]).cuda(), e["lengths"], initial)
    assert outs.is_cuda and np.abs(e["outputs"]).max() > 0.5
    assert_close({"outputs": (outs, e["outputs"])})
