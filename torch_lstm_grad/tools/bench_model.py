"""`torch-lstm-grad bench --model FILE`: a Keras model ported whole (`load_model`) against Keras
running the file on TensorFlow and on PyTorch (Keras 3's torch backend), each in a process of
its own (a process holds one Keras backend).

Each implementation runs in a worker process that loads the model once, makes its inputs from
one seed (token ids below an Embedding's input_dim, normal floats else; B and T as given), and
answers rounds: the parent sends "infer N" or "train N", the worker times N calls and answers
with the seconds. The rounds go to the workers in a shuffled order, so the implementations are
timed in the same minutes of a shared machine, and the ratios are medians of per-round ratios
(docs/performance.md, "How to measure").

* inference: the model at `training=False` with no gradient recorded (Keras/TensorFlow: the
  call in a `tf.function`, as `predict` runs it; Keras/PyTorch: under `torch.no_grad()`; the
  port: `model.eval()` under `torch.inference_mode()`);
* a training step: the model at `training=True` (the port: `model.train()`) and the gradient of
  the sum of its outputs with respect to every trainable weight; no optimizer update.

A benchmark, not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

__all__ = ["add_arguments", "run"]

_WORKERS = ("port", "keras-tensorflow", "keras-torch")


def add_arguments(parser) -> None:
    """The options of `bench --model` (besides bench's own --threads and --rounds)."""
    parser.add_argument("--batch", type=int, default=32, metavar="B", help="batch (default 32)")
    parser.add_argument(
        "--steps",
        type=int,
        default=60,
        metavar="T",
        help="time steps where the model's input leaves them free (default 60)",
    )


def _inputs(spec_file: str, B: int, T: int, seed: int = 0):
    """The port's model and its inputs (numpy), made as verify makes them."""
    import numpy as np

    import torch_lstm_grad
    from torch_lstm_grad.porting.verify import model_inputs

    model = torch_lstm_grad.load_model(spec_file)
    import torch

    spec = torch.load(spec_file, weights_only=True)["model"]["spec"]["input_specs"]
    return model, model_inputs(model, spec, B, T, np.random.default_rng(seed))


def _port_worker(src, converted, B, T):
    import torch

    model, xs = _inputs(converted, B, T)
    xs = [torch.from_numpy(x) for x in xs]
    params = [p for p in model.parameters() if p.requires_grad]

    def infer():
        model.eval()
        with torch.inference_mode():
            model(*xs)

    def train():
        model.train()
        outs = model(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.autograd.grad(sum(o.sum() for o in outs), params)

    return infer, train


def _keras_worker(src, converted, B, T, backend: str):
    os.environ["KERAS_BACKEND"] = backend
    import keras

    _, xs = _inputs(converted, B, T)
    model = keras.saving.load_model(src, compile=False)
    if backend == "tensorflow":
        import tensorflow as tf

        ins = [tf.constant(x) for x in xs]
        call = tf.function(lambda: model(ins if len(ins) > 1 else ins[0], training=False))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                outs = model(ins if len(ins) > 1 else ins[0], training=True)
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                loss = tf.add_n([tf.reduce_sum(o) for o in outs])
            return tape.gradient(loss, model.trainable_weights)

        return (lambda: call()), (lambda: step())
    import torch

    ins = [torch.from_numpy(x) for x in xs]

    def infer():
        with torch.no_grad():
            model(ins if len(ins) > 1 else ins[0], training=False)

    def train():
        outs = model(ins if len(ins) > 1 else ins[0], training=True)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        weights = [w.value for w in model.trainable_weights]
        torch.autograd.grad(sum(o.sum() for o in outs), weights)

    return infer, train


def worker(argv: list[str]) -> int:
    """The worker process: `bench_model WORKER SRC CONVERTED B T [THREADS]`, then rounds."""
    name, src, converted, B, T = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    if len(argv) > 5 and argv[5] != "none":
        os.environ["OMP_NUM_THREADS"] = argv[5]
    if name == "port":
        import torch

        if len(argv) > 5 and argv[5] != "none":
            torch.set_num_threads(int(argv[5]))
        fns = _port_worker(src, converted, B, T)
    else:
        fns = _keras_worker(src, converted, B, T, name.removeprefix("keras-"))
    infer, train = fns
    for fn in (infer, train, infer, train):  # warm-up (tracing, first allocations)
        fn()
    start = time.perf_counter()
    infer()
    middle = time.perf_counter()
    train()
    print(json.dumps({"infer": middle - start, "train": time.perf_counter() - middle}), flush=True)
    for line in sys.stdin:
        mode, n = line.split()
        fn = infer if mode == "infer" else train
        start = time.perf_counter()
        for _ in range(int(n)):
            fn()
        print(json.dumps({"seconds": (time.perf_counter() - start) / int(n)}), flush=True)
    return 0


def run(args) -> int:
    from .. import porting

    src = os.fspath(args.model)
    work = tempfile.mkdtemp(prefix="tlg-bench-model-")
    converted = os.path.join(work, "port.pt")
    porting.convert(src, converted, layers_only=False, log=lambda *a: None)
    threads = str(args.threads) if args.threads else "none"
    procs = {}
    for name in _WORKERS:
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "torch_lstm_grad.tools.bench_model", name, src, converted,
             str(args.batch), str(args.steps), threads],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )  # fmt: skip
    alive, calls = {}, {}
    for name, p in procs.items():
        line = p.stdout.readline().strip()
        if line.startswith("{"):
            alive[name] = p
            # a round's block of calls lasts about half a second: an idle worker's threads,
            # spinning for a while after its own block, then weigh little on the next one's
            calls[name] = {m: max(1, int(0.5 / max(t, 1e-6))) for m, t in json.loads(line).items()}
        else:
            print(f"{name}: could not run the model here (see its messages above)")
            p.kill()
    times = {(n, m): [] for n in alive for m in ("infer", "train")}
    rounds = 10 * args.rounds  # bench's --rounds multiplies the timing
    for _ in range(rounds):
        for mode in ("infer", "train"):
            order = list(alive)
            random.shuffle(order)
            for name in order:
                alive[name].stdin.write(f"{mode} {calls[name][mode]}\n")
                alive[name].stdin.flush()
                times[(name, mode)].append(json.loads(alive[name].stdout.readline())["seconds"])
    for p in alive.values():
        p.stdin.close()
        p.wait()
    print(f"bench --model {src}: B={args.batch}, T={args.steps}, {rounds} rounds, "
          f"threads {threads}")  # fmt: skip
    results = {}
    for mode, label in (("infer", "inference"), ("train", "training step")):
        line = [f"  {label}:"]
        row = results[label] = {"ms": {}, "ratio": {}}
        for name in alive:
            row["ms"][name] = statistics.median(times[(name, mode)]) * 1e3
            line.append(f"{name} {row['ms'][name]:.1f} ms")
        if "port" in alive:
            for other in alive:
                if other != "port":
                    ratio = statistics.median(
                        a / b for a, b in zip(times[("port", mode)], times[(other, mode)],
                                              strict=True)
                    )  # fmt: skip
                    row["ratio"][f"port / {other}"] = ratio
                    line.append(f"port / {other} {ratio:.2f}x")
        print("  ".join(line))
    if args.json:
        _write_json(args, src, threads, rounds, results)
    return 0


def _write_json(args, src, threads, rounds, results) -> None:
    import keras
    import tensorflow as tf

    from .bench import machine_info

    meta = machine_info(tf, 0.5, rounds)
    meta.update(keras_version=keras.__version__, threads=threads, model=os.path.basename(src),
                batch=args.batch, steps=args.steps)  # fmt: skip
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    raise SystemExit(worker(sys.argv[1:]))
