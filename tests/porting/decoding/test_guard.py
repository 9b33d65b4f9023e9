"""What `porting/decoding/guard.py` makes of a library's error: one plain line, without terminal
colours, the line that says what the file holds."""

import pytest
import torch

from tests.helpers import needs_tf


class _Unlisted(dict):
    """A class torch.load(weights_only=True) must refuse to construct."""


@needs_tf
def test_library_messages_become_one_plain_line():
    """What a library raises is shown on one line, without terminal colours; for torch.load's
    weights-only refusal, the line saying what the file holds (not its advice on loading the
    file unsafely, which comes first)."""
    import io

    from torch_lstm_grad.porting.decoding import guard

    assert guard._first_line(RuntimeError("\x1b[1mbold\x1b[0m first \x1b[31;1mline\n2nd")) == (
        "bold first line"
    )
    assert guard._first_line(KeyError("key")) == "key"
    assert guard._first_line(OSError("x" * 400)) == "x" * 300
    assert guard._first_line(OSError("  \n ")) == ""
    long = "advice\n\tWeightsUnpickler error: " + "y" * 400 + ". Please do this"
    assert guard._first_line(RuntimeError(long)) == "y" * 300
    buf = io.BytesIO()
    torch.save(_Unlisted(a=1), buf)
    buf.seek(0)
    with pytest.raises(Exception) as err:
        torch.load(buf, weights_only=True)
    assert "\x1b[" in str(err.value)  # (torch's own message has colours)
    assert guard._first_line(err.value) == (
        f"Unsupported global: GLOBAL {__name__}._Unlisted was not an allowed global by default"
    )
