"""The readers of the files users hold, each into a `porting.source.Source`: Keras files
(`keras_files.py`, checked by `hdf5_check.py`), TF checkpoints (`checkpoint.py` over
`tensorbundle.py` and `object_graph.py`), SavedModel directories (`saved_model.py`) and frozen
GraphDefs (`frozen_graph.py`)."""
