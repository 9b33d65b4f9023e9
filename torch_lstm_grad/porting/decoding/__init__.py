"""Bytes, decoded with bounds: the protobuf wire format (`proto.py`), protobuf text format turned
into it (`textproto.py`), and one error naming the file for whatever a corrupt file makes go
wrong in a library a reader hands its bytes to (`guard.py`)."""
