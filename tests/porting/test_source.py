"""What porting/source.py reads from the files users hold: the Keras version strings Keras files
store."""

import pytest

from tests.helpers import needs_tf


@needs_tf
def test_keras_version_strings_as_files_store_them():
    """The version strings Keras files store ("3.15.1", "2.2.4-tf" from tf.keras, "2.2"):
    missing parts are 0, "-tf" marks tf.keras; anything else is refused by name."""
    from torch_lstm_grad.porting.source import keras_version_tuple

    assert keras_version_tuple("3") == (3, 0, 0, False)
    assert keras_version_tuple("2.2") == (2, 2, 0, False)
    assert keras_version_tuple(" 2.2.4-tf ") == (2, 2, 4, True)
    assert keras_version_tuple("3.15.1") == (3, 15, 1, False)
    with pytest.raises(ValueError, match="keras_version: cannot read version 'x.1'"):
        keras_version_tuple("x.1")
