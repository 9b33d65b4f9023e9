"""`KerasModel`, the whole model as one module, as PyTorch runs modules: under
`torch.compile(fullgraph=True)`, `torch.export`, DistributedDataParallel and `.to()`, each
against the same port run eagerly (which tests/porting/test_whole_model.py holds to Keras).
The model: Embedding(mask_zero) -> Bidirectional(GRU) -> BatchNormalization -> LSTM -> Dense,
so the mask is produced, passed on and consumed, and BatchNormalization's buffers travel."""

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import torch_lstm_grad
from tests.helpers import keras_module, needs_tf, rng
from torch_lstm_grad import porting

pytestmark = needs_tf
VOCAB, LR = 30, 0.1


@pytest.fixture(scope="module")
def port_file(tmp_path_factory):
    keras = keras_module()
    L = keras.layers
    ids = keras.Input((None,), dtype="int32")
    x = L.Embedding(VOCAB, 6, mask_zero=True)(ids)
    x = L.Bidirectional(L.GRU(5, return_sequences=True))(x)
    x = L.BatchNormalization()(x)
    x = L.LSTM(4)(x)
    model = keras.Model(ids, L.Dense(3, activation="softmax")(x))
    g = rng(3)
    for w in model.weights:
        v = g.standard_normal(w.shape).astype(np.float32) * 0.4
        w.assign(np.abs(v) + 0.5 if "variance" in w.name else v)
    d = tmp_path_factory.mktemp("model")
    model.save(d / "m.keras")
    porting.convert(d / "m.keras", d / "m.pt", layers_only=False, log=lambda *a: None)
    return str(d / "m.pt")


def _ids(seed=0, B=3, T=9):
    t = torch.randint(1, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))
    t[0, T // 2 :] = 0  # padding, masked by the Embedding
    return t


def _outputs_and_grads(model, ids):
    out = model(ids)
    loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum()
    params = [p for p in model.parameters() if p.requires_grad]
    return [out.detach()] + list(torch.autograd.grad(loss, params))


def test_compile_fullgraph_equals_eager(port_file):
    model = torch_lstm_grad.load_model(port_file).eval()
    ids = _ids()
    expected = _outputs_and_grads(model, ids)
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    for got, want in zip(_outputs_and_grads(compiled, ids), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_export_equals_eager(port_file):
    model = torch_lstm_grad.load_model(port_file).eval()
    ids = _ids()
    program = torch.export.export(model, (ids,))
    other = _ids(seed=1)  # other ids, the same shape: the program is not the traced values
    for x in (ids, other):
        torch.testing.assert_close(program.module()(x), model(x), rtol=0, atol=0)


def test_to_float64_keeps_keras_names_and_computes_in_float64(port_file):
    model = torch_lstm_grad.load_model(port_file).eval()
    names = list(model.keras_weights())
    wide = torch_lstm_grad.load_model(port_file).eval().to(torch.float64)
    assert list(wide.keras_weights()) == names
    assert all(t.dtype == torch.float64 for t in wide.keras_weights().values())
    y = wide(_ids())
    assert y.dtype == torch.float64
    torch.testing.assert_close(y.float(), model(_ids()), rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_to_cuda_equals_cpu(port_file):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    model = torch_lstm_grad.load_model(port_file).eval()
    ids = _ids()
    expected = _outputs_and_grads(model, ids)
    got = _outputs_and_grads(model.to("cuda"), ids.cuda())
    for g, w in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)


def _worker(rank, port_file, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    model = torch_lstm_grad.load_model(port_file).eval()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    ddp(_ids(seed=10 + rank)).square().sum().backward()
    opt.step()
    torch.save(model.state_dict(), os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()
    os._exit(0)  # as in tests/modules/test_modules_distributed.py: gloo's exit can abort


def test_ddp_step_averages_the_ranks_gradients(port_file, tmp_path):
    mp.start_processes(_worker, args=(port_file, str(tmp_path / "init"), str(tmp_path)),
                       nprocs=2, start_method="spawn")  # fmt: skip
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    ref = torch_lstm_grad.load_model(port_file).eval()
    before = {k: v.clone() for k, v in ref.state_dict().items()}
    grads = []
    for r in range(2):
        ref.zero_grad()
        ref(_ids(seed=10 + r)).square().sum().backward()
        grads.append({n: p.grad.clone() for n, p in ref.named_parameters()})
    for name, value in before.items():
        want = value - LR * (grads[0][name] + grads[1][name]) / 2 if name in grads[0] else value
        torch.testing.assert_close(ranks[1][name], ranks[0][name], rtol=0, atol=0)
        torch.testing.assert_close(ranks[0][name], want)
    assert any(not torch.equal(ranks[0][n], before[n]) for n in grads[0])
