"""The `torch-lstm-grad` command (`cli.py`) and what its subcommands run: `check.py` (every op
against TensorFlow or the float64 reference), `bench.py` (timings), `doctor.py` (the install),
`build_env.py` (what a build needs, also loaded by setup.py)."""
