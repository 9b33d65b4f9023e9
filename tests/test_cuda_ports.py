"""Ports on the GPU against TensorFlow's own numbers: tf_keras 2.21's files (tests/data/keras2;
the outputs and gradients tf_keras computed from them are stored beside them, so no TensorFlow is
needed where this runs), converted as a user would, moved to CUDA, and compared with tf_keras to
the porting tests' tolerance — training (outputs, input and weight gradients) and no_grad
inference, which run different ops. test_cuda_modules.py ties each module's GPU run to its CPU
run; this ties what a converted file computes on the GPU to what TF computed. Skipped, with the
reason printed, without a GPU or a CUDA build of the extension. TF32 is off.
"""

import os

import pytest
from conftest import _CUDA_SKIP, CUDA_OK
from porting_oracle import KERAS2, compare_with_stored_keras2

from torch_lstm_grad import cli, porting

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not CUDA_OK, reason=_CUDA_SKIP),
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
    "saved_model_subclassed": ("saved_model_subclassed", [], "subclassed", ["bi", "gru"],
                               False, True),  # fmt: skip
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
