"""The Python side of the C++ library: loading `_C` (`extension.py`), the fake kernels and the
autograd registered on every op (`registrations.py`), and the shape rules those fakes apply,
mirrors of `csrc/checks.h` (`checks.py`) and `csrc/cudnn_rnn_config.h` (`cudnn_rnn_config.py`)."""
