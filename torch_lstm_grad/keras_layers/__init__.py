"""Keras layers as `nn.Module`s holding Keras' own weights and doing what Keras' call does.

`recurrent.py`: `KerasLSTM`, `KerasGRU`, `KerasSimpleRNN` and `KerasBidirectional` (docs/api.md,
"Keras layers").
"""

from .recurrent import KerasBidirectional, KerasGRU, KerasLSTM, KerasRNN, KerasSimpleRNN

__all__ = ["KerasBidirectional", "KerasGRU", "KerasLSTM", "KerasRNN", "KerasSimpleRNN"]
