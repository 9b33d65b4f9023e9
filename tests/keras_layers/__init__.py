"""keras_layers/: the Keras layer modules against Keras itself."""
