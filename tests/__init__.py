"""The test suite. Its folders mirror the package (torch_lstm_grad/): the tests of a file are in
the folder of the same name; robustness/ and tf_ported/ hold the checks against hostile or
altered inputs and stress, and TensorFlow's own tests ported. Shared helpers: helpers.py."""
