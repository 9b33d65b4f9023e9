"""Whole Keras models ported with `convert` against Keras running them on TensorFlow and on
PyTorch (Keras 3's torch backend): inference and a training step, paired in shuffled rounds by
`torch-lstm-grad bench --model` (torch_lstm_grad/tools/bench_model.py).

The models, written by Keras 3 with seeded weights under build/bench-models/:

* `classifier`: token ids -> Embedding(5000, 128) -> Bidirectional(LSTM(256),
  return_sequences) -> LSTM(256) -> Dense(20); no mask;
* `tagger`: token ids -> Embedding(5000, 128, mask_zero) -> Bidirectional(GRU(128),
  return_sequences) -> TimeDistributed(Dense(17)); masked (the first row half padding).

    python benchmarks/bench_models.py [--threads 2] [--rounds 1] [--json-dir DIR]

Writes DIR/cpu-DATE-model-NAME.json for each with --json-dir.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "build", "bench-models")


def _write_models() -> dict[str, str]:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    keras.utils.set_random_seed(0)
    os.makedirs(MODELS, exist_ok=True)
    L = keras.layers
    ids = keras.Input(shape=(None,), dtype="int32")
    x = L.Embedding(5000, 128)(ids)
    x = L.Bidirectional(L.LSTM(256, return_sequences=True))(x)
    x = L.LSTM(256)(x)
    classifier = keras.Model(ids, L.Dense(20)(x))
    ids = keras.Input(shape=(None,), dtype="int32")
    x = L.Embedding(5000, 128, mask_zero=True)(ids)
    x = L.Bidirectional(L.GRU(128, return_sequences=True))(x)
    tagger = keras.Model(ids, L.TimeDistributed(L.Dense(17))(x))
    paths = {}
    for name, model in (("classifier", classifier), ("tagger", tagger)):
        paths[name] = os.path.join(MODELS, f"{name}.keras")
        model.save(paths[name])
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--json-dir", help="write cpu-DATE-model-NAME.json files here")
    args = p.parse_args(argv)
    # the models are written in a process of their own: the workers load them fresh
    code = "import sys; sys.path.insert(0, %r); import bench_models as b; b._write_models()"
    subprocess.run([sys.executable, "-c", code % os.path.dirname(__file__)], check=True)
    if args.json_dir:
        os.makedirs(args.json_dir, exist_ok=True)
    date = datetime.date.today().isoformat()
    for name in ("classifier", "tagger"):
        cmd = [sys.executable, "-m", "torch_lstm_grad.tools.cli", "bench",
               "--model", os.path.join(MODELS, f"{name}.keras"), "--threads", str(args.threads),
               "--rounds", str(args.rounds), "--batch", str(args.batch),
               "--steps", str(args.steps)]  # fmt: skip
        if args.json_dir:
            cmd += ["--json", os.path.join(args.json_dir, f"cpu-{date}-model-{name}.json")]
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
