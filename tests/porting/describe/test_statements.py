"""What the user states on the command line (`porting/describe/statements.py`): `--set` items
parsed as a shell user writes them."""

import pytest


def test_set_statements_allow_spaces_around_their_parts():
    """`--set` as a shell user writes it: spaces around the layer, the key and the value are
    not part of them; a value that is JSON is read as JSON, any other as text."""
    from torch_lstm_grad.porting.describe.statements import parse_set

    assert parse_set(' lstm : recurrent_activation = "sigmoid" ') == (
        "lstm",
        "recurrent_activation",
        "sigmoid",
    )
    assert parse_set("unit_forget_bias= true") == (None, "unit_forget_bias", True)
    assert parse_set("gru:reset_after=tanh") == ("gru", "reset_after", "tanh")
    with pytest.raises(ValueError, match=r"--set 'lstm: = 1': no KEY before '='"):
        parse_set("lstm: = 1")
