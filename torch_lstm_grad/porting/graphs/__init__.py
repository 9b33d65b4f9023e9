"""What a stored graph computes: the GraphDef reader every graph format uses (`graph_def.py`),
TF1 cells found by the ops around their variables (`tf1_cells.py`), and Keras recurrent layers
read back from the loops of a SavedModel's functions (`keras_loops.py`)."""
