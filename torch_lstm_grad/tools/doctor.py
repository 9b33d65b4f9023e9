"""``torch-lstm-grad doctor``: what is installed, what was built, and whether the two match.

Prints the Python, torch, CUDA, cuDNN and compiler versions, what the extension was compiled
as (CPU-only or CUDA, for which architectures, with which toolkit and cuDNN), whether the .so
matches and loads into the running torch, and what a rebuild here would use. Exit code 0 when the
extension loads into this torch, 1 when it does not (then the command also runs from
``torch_lstm_grad/__init__.py``, which cannot finish importing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

import torch

from .._library import extension
from . import build_env

__all__ = ["add_arguments", "main", "report", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def run(args: argparse.Namespace) -> int:
    return _print(report(), args.json)


def main(argv: list[str], load_problem: str) -> int:
    """The command for a process whose extension did not load (the package's ``__init__``
    calls it)."""
    parser = argparse.ArgumentParser(prog="torch-lstm-grad doctor", description=__doc__)
    add_arguments(parser)
    return _print(report(load_problem), parser.parse_args(argv).json)


def report(load_problem: str | None = None) -> dict:
    """Everything the command prints, as a dict. ``load_problem``: why the extension did not
    load, when the caller already knows; otherwise it is loaded (it already is, normally)."""
    if load_problem is None:
        load_problem = extension.load_error()
    info = extension.build_info()
    built = {k: v for k, v in vars(info).items() if k.isupper()} if info else None
    loaded = load_problem is None
    return {
        "torch_lstm_grad": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "python": f"{platform.python_version()} ({sys.executable})",
        "torch": _torch(),
        "extension": {
            "so": extension.so_path(),
            "built": built,
            "matches_torch": built is not None and built["TORCH_VERSION"] == torch.__version__,
            "loads": loaded,
            "problem": load_problem,
            "cuda_kernels": bool(torch.ops.torch_lstm_grad._built_with_cuda()) if loaded else None,
            "cpu_isa": str(torch.ops.torch_lstm_grad._cpu_isa()) if loaded else None,
        },
        "rebuild_would_use": _toolchain(),
    }


def _torch() -> dict:
    out = {"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "gpus": []}
    if torch.version.cuda is not None:
        cudnn = torch.backends.cudnn.version()
        out["cudnn"] = f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn else None
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(i)
                out["gpus"].append(f"{torch.cuda.get_device_name(i)} (sm_{major}{minor})")
    return out


def _toolchain() -> dict:
    ninja = shutil.which("ninja")
    if ninja:
        try:
            version = subprocess.run([ninja, "--version"], capture_output=True, text=True).stdout
        except OSError:
            version = "does not run"
        ninja = f"{version.strip()} ({ninja})"
    out = {"compiler": build_env.compiler_version(), "ninja": ninja or "not found", "cuda": None}
    try:
        cuda = build_env.configure_cuda(torch)
    except build_env.BuildError as err:
        out["cuda"] = f"CUDA build impossible: {err}"
        return out
    if cuda is None:
        out["cuda"] = (
            "none: torch is a CPU build"
            if torch.version.cuda is None
            else f"none: {build_env.FORCE_CPU}=1"
        )
    else:
        t = cuda.toolkit
        out["cuda"] = f"CUDA {t.version} at {t.home} ({t.found_by})"
        out["cudnn"] = f"{cuda.cudnn_version} ({cuda.cudnn_from})"
        out["archs"] = f"{cuda.archs} ({cuda.archs_from})"
    return out


def _print(data: dict, as_json: bool) -> int:
    code = 0 if data["extension"]["loads"] else 1
    if as_json:
        print(json.dumps(data, indent=2))
        return code
    t, ext, tool = data["torch"], data["extension"], data["rebuild_would_use"]
    rows = [
        ("torch_lstm_grad", data["torch_lstm_grad"]),
        ("python", data["python"]),
        (
            "torch",
            t["version"]
            + (f", CUDA {t['cuda']}, cuDNN {t['cudnn']}" if t["cuda"] else ", CPU-only"),
        ),
        ("GPUs visible", ", ".join(t["gpus"]) or "none"),
        ("extension", ext["so"] or "not built"),
    ]
    built = ext["built"]
    if built:
        rows += [
            ("  built against", f"torch {built['TORCH_VERSION']} (Python {built['PYTHON']})"),
            ("  compiled", "CPU + CUDA kernels" if built["WITH_CUDA"] else "CPU kernels only"),
        ]
        if built["WITH_CUDA"]:
            rows += [
                ("  archs", f"{built['CUDA_ARCHS']} ({built['CUDA_ARCHS_FROM']})"),
                ("  CUDA toolkit", built["CUDA_TOOLKIT"]),
                ("  cuDNN", built["CUDNN"]),
            ]
        rows += [("  compiler", built["COMPILER"] + (", DEBUG=1" if built["DEBUG"] else ""))]
    elif ext["so"]:
        rows += [("  built", "by an older setup.py: no record of what it was built against")]
    rows += [
        ("  matches torch", "yes" if ext["matches_torch"] else "NO" if built else "unknown"),
        ("  loads", "yes" if ext["loads"] else "NO"),
    ]
    if ext["loads"]:
        rows += [
            ("  CUDA kernels", "yes" if ext["cuda_kernels"] else "no"),
            ("  CPU kernels run", f"{ext['cpu_isa']} (ATEN_CPU_CAPABILITY lowers it)"),
        ]
    rows += [
        ("rebuild would use", ""),
        ("  compiler", tool["compiler"]),
        ("  ninja", tool["ninja"]),
    ]
    rows += [("  CUDA", tool["cuda"])]
    if "cudnn" in tool:
        rows += [("  cuDNN", tool["cudnn"]), ("  archs", tool["archs"])]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}".rstrip())
    if ext["problem"]:
        print("\n" + ext["problem"])
    return code
