"""The ``torch-lstm-grad`` command (also ``python -m torch_lstm_grad``).

Subcommands:

* ``check``: every raw op on generated inputs against TensorFlow's raw op when TensorFlow is
  installed, else against the float64 reference; prints a table of max errors per output and exits
  1 on any miss (cases and tolerances: ``parity.py``).
* ``bench``: CPU timings of BlockLSTM fwd and fwd+bwd against ``torch.nn.LSTM`` and TF
  (``bench.py``; also ``benchmarks/bench_block_lstm.py``).
* ``convert``: TF checkpoint / Keras file to a PyTorch file that ``porting.load`` reads
  (``porting/``): exact ports or exit 2 naming what cannot be reproduced.
* ``doctor``: torch / CUDA / cuDNN / compiler versions, what the extension was built as, and
  whether it matches the running torch (``doctor.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["main"]

_COLUMNS = ("op", "config", "dtype", "oracle", "output", "max abs err", "tolerance", "")


def _resolve_oracle(requested: str):
    """(oracle, None) or (None, error message)."""
    from . import check as parity

    if requested == "reference":
        return "reference", None
    try:
        parity.import_tf()
    except ImportError as err:
        if requested == "tf":
            return None, f"--oracle tf: TensorFlow cannot be imported ({err})"
        print(
            "TensorFlow is not installed: checking against the float64 reference", file=sys.stderr
        )
        return "reference", None
    return "tf", None


def _print_rows(rows, out) -> None:
    table = [_COLUMNS] + [
        (
            r.op,
            r.config,
            r.dtype,
            r.oracle,
            r.output,
            f"{r.max_abs_err:.2e}",
            f"{r.tol:.1e}",
            "ok" if r.ok else "MISS",
        )
        for r in rows
    ]
    widths = [max(len(row[c]) for row in table) for c in range(len(_COLUMNS))]
    for row in table:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _check(args: argparse.Namespace) -> int:
    import torch

    from . import check as parity

    ops = None
    if args.ops:
        ops = [op.strip() for op in args.ops.split(",") if op.strip()]
        unknown = [op for op in ops if op not in parity.OPS and op != parity.CUDNN_OP]
        if unknown:
            print(
                f"--ops: unknown op(s) {', '.join(unknown)}; known: {', '.join(parity.OPS)}",
                file=sys.stderr,
            )
            return 2
    oracle, error = _resolve_oracle(args.oracle)
    if error:
        print(error, file=sys.stderr)
        return 2
    block_ops = None if ops is None else [op for op in ops if op != parity.CUDNN_OP]
    rows = parity.run_checks(oracle, seed=args.seed, ops=block_ops) if block_ops != [] else []
    if ops is None or parity.CUDNN_OP in ops:  # TF has no CPU kernel: torch.nn is the oracle
        rows += parity.run_cudnn_checks(seed=args.seed)
    _print_rows(rows, sys.stdout)
    if oracle == "tf":
        no_half = [
            op for op in block_ops or parity.OPS if torch.float16 not in parity.OPS[op].tf_dtypes
        ]
        print(
            "not compared (no TF kernel): float64 (use --oracle reference)"
            + "".join(f", {op} float16" for op in no_half)
        )
    misses = sum(not r.ok for r in rows)
    print(
        f"{len(rows)} outputs compared (block ops against {oracle}, CudnnRNN against torch.nn): "
        + (f"{misses} missed the tolerance" if misses else "all ok")
    )
    return 1 if misses else 0


def _bench(args: argparse.Namespace) -> int:
    if args.model is not None:
        from . import bench_model

        return bench_model.run(args)
    from . import bench

    return bench.run(args)


def _convert(args: argparse.Namespace) -> int:
    # TF's C++ log lines (a checkpoint reader's "Could not open ...") would come on top of the
    # one-line message a file that cannot be read gets; the user's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .. import porting

    if args.output is None:
        print("torch-lstm-grad convert: -o/--output OUT.pt is required", file=sys.stderr)
        return 2
    try:
        data = porting.convert(
            args.src,
            args.output,
            sets=args.set,
            keras_version=args.keras_version,
            config=args.config,
            assume_defaults=args.assume_defaults,
            approximate=args.approximate,
            forget_bias=args.forget_bias,
            signature=args.signature,
            layers_only=args.layers_only,
            custom=args.custom,
        )
    except (ValueError, NotImplementedError, OSError) as err:
        message = str(err)
        if args.src not in message.split("\n", 1)[0]:  # a layer's refusal names the layer
            message = f"{args.src}: {message}"
        print(f"torch-lstm-grad convert: {message}", file=sys.stderr)
        return 2
    whole = "model" in data
    loader = "torch_lstm_grad.load_model; its layers: load" if whole else "torch_lstm_grad.load"
    print(f"wrote {args.output} (load with {loader})")
    if not args.verify:
        return 0
    try:
        report = porting.verify(
            args.src,
            args.output,
            tol=args.verify_tol,
            float64=args.verify_float64,
            signature=args.signature,
            config=args.config,
        )
    except porting.VerifyUnavailable as err:
        print(f"torch-lstm-grad convert --verify: {err}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.ok else 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-lstm-grad",
        description="TensorFlow's fused RNN raw ops for PyTorch: parity checks and benchmarks.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="compare every op with TensorFlow or the reference",
        description=_check_description(),
    )
    check.add_argument(
        "--oracle",
        choices=("auto", "tf", "reference"),
        default="auto",
        help="tf: TensorFlow's raw ops (float32, float16); reference: the float64 "
        "pure-torch reference (float64, float32, float16); auto (default): tf when "
        "TensorFlow can be imported, else reference",
    )
    check.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    check.add_argument("--ops", metavar="OP[,OP...]", help="only these ops (default: all)")
    check.set_defaults(func=_check)

    from . import bench as bench_module

    bench = sub.add_parser(
        "bench",
        help="time BlockLSTM fwd/fwd+bwd vs nn.LSTM and TF",
        description=bench_module.__doc__.split("\n")[0],
    )
    bench_module.add_arguments(bench)
    from . import bench_model

    models = bench.add_argument_group(
        "a whole model (--model): the port against Keras on TensorFlow and on PyTorch"
    )
    models.add_argument("--model", metavar="FILE", help="a Keras model file (.keras, .h5)")
    bench_model.add_arguments(models)
    bench.set_defaults(func=_bench)

    convert = sub.add_parser(
        "convert",
        help="TF/Keras file to PyTorch, exactly or not at all",
        description="Reads a Keras .keras/.weights.h5/.h5 file, a TF1/TF2 checkpoint prefix, a "
        "SavedModel directory or a frozen GraphDef (.pb/.pbtxt), prints the format it found, "
        "describes each recurrent layer from what the file stores (Keras config, keras_version, "
        "TF2 object graph, TF1 meta graph, the saved functions' ops, the frozen graph's ops), "
        "prints every attribute with its origin, and writes "
        "modules that compute exactly what TF/Keras computed to OUT.pt (torch_lstm_grad.load "
        "reads it). What the modules cannot reproduce exactly, or what the file does not store "
        "and you did not state, stops the conversion with exit code 2 and a message naming the "
        "layer, the attribute and the value.",
    )
    convert.add_argument(
        "src",
        help="a SavedModel directory, a frozen GraphDef (.pb, .pbtxt), a TF checkpoint prefix, "
        "or a .keras, .h5 or .weights.h5 file",
    )
    convert.add_argument("-o", "--output", help="the .pt file to write (required)")
    convert.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="[LAYER:]KEY=VALUE",
        help="state what the file does not store, for one layer or all (repeatable): a Keras "
        "config key (recurrent_activation=sigmoid, go_backwards=true) or a TF1 cell attribute "
        "(forget_bias=1.0, cell_clip=3, activation=tanh, proj_clip=none, "
        "clip_gradient=zero|straight_through)",
    )
    convert.add_argument(
        "--config",
        metavar="FILE",
        help="the Keras model config of a weights-only file or checkpoint: model.to_json() "
        "output, a .keras archive, or a legacy .h5 with model_config",
    )
    convert.add_argument(
        "--keras-version",
        metavar="V",
        help="the Keras that wrote a file which does not say (its defaults and its "
        "hard_sigmoid apply), e.g. 2.2.4 or 3.0",
    )
    convert.add_argument(
        "--assume-defaults",
        action="store_true",
        help="for a TF1 checkpoint without its .meta graph: take the TF1 class defaults "
        "(forget_bias 1.0, no clip, tanh) for what the checkpoint does not store",
    )
    convert.add_argument(
        "--approximate",
        action="store_true",
        help="where an exact port is impossible but a close one exists (e.g. a straight-through "
        "clip gradient for LSTMCell's zero one, float32 for a mixed-precision layer), build it "
        "and print a WARNING naming the difference on stderr",
    )
    convert.add_argument(
        "--forget-bias",
        type=float,
        default=None,
        help="shorthand for --set forget_bias=F (TF1 LSTM cells: not stored in checkpoints)",
    )
    convert.add_argument(
        "--signature",
        metavar="NAME",
        help="a SavedModel's signature whose functions describe the layers (default: "
        "serving_default, or the only one)",
    )
    convert.add_argument(
        "--layers-only",
        action="store_true",
        help="write the recurrent layers alone (torch_lstm_grad.load), not the whole Keras model "
        "a file's config describes (torch_lstm_grad.load_model)",
    )
    convert.add_argument(
        "--custom",
        action="append",
        default=[],
        metavar="CLASS",
        help="a Keras layer class of your own (repeatable): kept with its config and weights; "
        "load_model(OUT, custom_layers={CLASS: factory}) supplies its module",
    )
    convert.add_argument(
        "--verify",
        action="store_true",
        help="after writing OUT.pt, run every ported layer and TensorFlow running SRC on the "
        "same random inputs (batch sizes, lengths, masks, initial states) and print the max "
        "scaled error of every output, state and gradient; exit 3 if one exceeds --verify-tol "
        "(needs TensorFlow)",
    )
    convert.add_argument(
        "--verify-tol",
        type=float,
        default=1e-5,
        metavar="TOL",
        help="the largest scaled error --verify accepts (default 1e-5)",
    )
    convert.add_argument(
        "--verify-float64",
        action="store_true",
        help="with --verify, also print TF's and the port's errors against the port run in float64",
    )
    convert.set_defaults(func=_convert)

    from . import doctor

    diagnose = sub.add_parser(
        "doctor",
        help="versions, what was built, and whether it matches the installed torch",
        description=doctor.__doc__.split("\n\n")[0],
    )
    doctor.add_arguments(diagnose)
    diagnose.set_defaults(func=doctor.run)
    return parser


def _check_description() -> str:
    return (
        "Runs every raw op (LSTMBlockCell, BlockLSTM, BlockLSTMV2, GRUBlockCell and their "
        "Grad ops) on generated inputs with several configs (peephole, cell_clip, "
        "seq_len_max < T) and compares each output with the oracle; CudnnRNNV3 forward and "
        "backward (lstm, gru, rnn_tanh, rnn_relu; layers, directions, projection, lengths) "
        "are compared with torch.nn.LSTM/GRU/RNN on the same weights, as TF has no CPU "
        "kernel for them. The tolerance printed is "
        "the per-dtype bound times max(1, max |oracle output|). Exit code 1 on any miss."
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
