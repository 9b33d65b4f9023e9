"""The modules export with torch.export: exported, saved, loaded back, and the loaded program
gives the eager module's outputs (the ops are found by name through their registrations)."""

import pytest
import torch

from torch_lstm_grad import modules as M

T, B, I, H = 4, 2, 3, 5


def _x():
    return torch.randn(T, B, I)


CASES = {
    "LSTMBlockCell": (
        lambda: M.LSTMBlockCell(H, I, cell_clip=3.0, use_peephole=True),
        lambda: (torch.randn(B, I), (torch.randn(B, H), torch.randn(B, H))),
    ),
    "LSTMBlockFusedCell": (
        lambda: M.LSTMBlockFusedCell(H, I, use_peephole=True),
        lambda: (_x(),),
    ),
    "GRUBlockCell": (lambda: M.GRUBlockCell(H, I), lambda: (torch.randn(B, I),)),
    "CudnnLSTM": (
        lambda: M.CudnnLSTM(2, H, I, direction="bidirectional"),
        lambda: (_x(), None, torch.tensor([4, 2])),
    ),
    "CudnnGRU": (lambda: M.CudnnGRU(1, H, I), lambda: (_x(),)),
}


# torch.export.load reads the weights with torch.frombuffer, which warns about its read-only
# buffer (torch's own loader, nothing here).
@pytest.mark.filterwarnings("ignore:The given buffer is not writable")
@pytest.mark.parametrize("name", CASES)
def test_export_save_load_same_outputs(name, tmp_path):
    make, inputs = CASES[name]
    module, args = make().eval(), inputs()
    program = torch.export.export(module, args)
    torch.export.save(program, tmp_path / "program.pt2")
    loaded = torch.export.load(tmp_path / "program.pt2").module()
    expected = torch.utils._pytree.tree_leaves(module(*args))
    got = torch.utils._pytree.tree_leaves(loaded(*args))
    assert len(got) == len(expected) >= 2
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert any(op.startswith("torch_lstm_grad.") for op in ops), ops
