"""``python -m torch_lstm_grad``: the ``torch-lstm-grad`` command (see tools/cli.py)."""

from .tools.cli import main

raise SystemExit(main())
