"""TensorFlow's own tests of these ops, ported (TF's inputs, shapes and tolerances kept)."""
