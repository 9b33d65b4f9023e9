"""Porting TF and Keras files to this package's modules, exactly or not at all.

The flow, one way (docs/porting.md):

    formats/     readers: a file's variables under uniform names, and what the file says about
                 its writer and layers (a Keras config, a TF2 object graph, a TF1 meta graph)
                 -> `source.Source`; a corrupt or hostile file: one ValueError naming it
    decoding/    the bytes under them: protobuf wire and text format, bounded; `guard`
    graphs/      what a stored graph computes: the GraphDef reader, TF1 cells found by their
                 ops, Keras layers read back from a SavedModel's loops
    describe/    Source -> one LayerDescription per layer, every attribute with its origin,
                 with the user's statements where the file is silent
    build/       LayerDescription -> module, or Refused
    convert.py   convert(): all of it, with the log; load()
    verify.py    verify(): a converted file against TF running the file

`torch-lstm-grad convert` is `convert`; `torch_lstm_grad.load` is `load`.
"""

from .convert import FORMAT, convert, describe, load, load_model, read_source, read_variables
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
    "load_model",
    "read_source",
    "read_variables",
    "verify",
]
