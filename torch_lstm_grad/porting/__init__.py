"""Porting TF and Keras files to this package's modules, exactly or not at all.

The flow, one module each:

    keras_files.py, checkpoint.py      readers: a file's variables under uniform names, and what
    (tensorbundle.py, object_graph.py,   the file says about its writer and layers (a Keras
     tf1_graph.py, proto.py, guard.py)   config, a TF2 object graph, a TF1 meta graph) -> Source;
                                         a corrupt or hostile file: one ValueError naming it
    describe_keras.py, describe_tf1.py  Source -> one LayerDescription per recurrent layer
    (description.py, statements.py)      (description.py): every attribute with its origin
    builders.py, build_tf1.py           LayerDescription -> module, or Refused
    convert.py                          convert(): all of it, with the log; load()
    verify.py                           verify(): a converted file against TF running the file

`torch-lstm-grad convert` is `convert`; `torch_lstm_grad.load` is `load`.
"""

from .convert import FORMAT, convert, describe, load, read_source, read_variables
from .describe.description import Attr, LayerDescription, Refusal, Refused
from .describe.statements import Statements
from .formats.checkpoint import READER_ENV
from .verify import VerifyReport, VerifyUnavailable, verify

__all__ = [
    "FORMAT",
    "READER_ENV",
    "Attr",
    "LayerDescription",
    "Refusal",
    "Refused",
    "Statements",
    "VerifyReport",
    "VerifyUnavailable",
    "convert",
    "describe",
    "load",
    "read_source",
    "read_variables",
    "verify",
]
