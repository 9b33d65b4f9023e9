"""A `Source` -> one `LayerDescription` (`description.py`) per layer, every attribute with where
its value came from: Keras recurrent layers (`keras_rnn.py`) and TF1 cells (`tf1_cells.py`), with
what the user states where the file is silent (`statements.py`)."""
