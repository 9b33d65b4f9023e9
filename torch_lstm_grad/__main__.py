"""``python -m torch_lstm_grad``: the ``torch-lstm-grad`` command (see cli.py)."""

from .tools.cli import main

raise SystemExit(main())
