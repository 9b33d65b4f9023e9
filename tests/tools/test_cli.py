"""The torch-lstm-grad command line: `convert` without an output is refused (the subcommands
themselves: test_check.py, test_bench.py, test_doctor.py; `convert`: tests/porting/)."""

from torch_lstm_grad.tools import cli


def test_convert_needs_an_output(capsys):
    assert cli.main(["convert", "model.ckpt"]) == 2
    assert "-o/--output OUT.pt is required" in capsys.readouterr().err
