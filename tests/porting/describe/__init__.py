"""porting/describe/: the Keras and TF1 describers and the user's statements."""
