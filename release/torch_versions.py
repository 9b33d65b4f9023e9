"""Build torch_lstm_grad and run its test suite on each torch version of the supported range,
each in its own venv, the way a user installs it; writes a Markdown report (and the same as
JSON) to benchmarks/results/ (its index: benchmarks/results/README.md).

Per version, in a venv with nothing but ``pip install torch==V`` (PyPI's CUDA wheels run on a
machine without a GPU; 2.13.0 is the local CPU wheel here):

1. ``pip install --no-build-isolation -v -e .`` after deleting that torch's object directory
   (the first build), checking that pip kept the venv's torch;
2. the same command again: ninja must have nothing to compile;
3. one source's mtime touched, the command again: exactly that file is recompiled;
4. the test tools: ``pytest expecttest``, and with ``--tf`` TensorFlow 2.21, the test oracle
   (without it the TF-dependent tests skip);
5. ``torch-lstm-grad doctor --json`` (what was built), ``cuobjdump --list-elf`` on the .so with
   ``--cuobjdump`` (which GPU architectures it holds);
6. ``python -m pytest -q``.

``VERSION:cpu`` builds with ``TORCH_LSTM_GRAD_FORCE_CPU=1`` (a CUDA torch whose CUDA major has no
toolkit here). The versions share this source tree, so they run one after the other, and the
in-tree .so is the last version's afterwards. Not part of the test suite (minutes per version,
GBs of wheels).

    python release/torch_versions.py --venvs /tmp/venvs 2.11.0 2.13.0 2.15.0
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = ["pip", "install", "--no-build-isolation", "-v", "-e", "."]
TOUCHED = "csrc/cpu/gru_block.cpp"


def _sh(args: list[str], log, env=None, check=True) -> tuple[int, str, float]:
    """Runs ``args`` in the source tree; output appended to ``log``. (rc, output, seconds)."""
    start = time.perf_counter()
    done = subprocess.run(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seconds = time.perf_counter() - start
    log.write(f"$ {shlex.join(args)}\n{done.stdout}\n[rc {done.returncode}, {seconds:.1f} s]\n")
    log.flush()
    if check and done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed (rc {done.returncode}); see {log.name}")
    return done.returncode, done.stdout, seconds


def _compiled(output: str) -> list[str]:
    """The objects ninja compiled, from its ``[k/n] command ... -o OBJ`` lines."""
    return [m.group(1) for m in re.finditer(r"^\s*\[\d+/\d+\] .* -o (\S+)", output, re.M)]


def _build(venv: str, prefix: list[str], env: dict, log) -> dict:
    pip = [os.path.join(venv, "bin", "python"), "-m", *BUILD]
    rc, out, seconds = _sh(prefix + pip, log, env=env, check=False)
    note = None
    if rc != 0 and "pip install wheel" in out:
        # setup.py's message for setuptools < 70.1 without the wheel package: do what it says.
        note = "setup.py asked for the wheel package (setuptools < 70.1): installed, rerun"
        _sh([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "wheel"], log)
        rc, out, seconds = _sh(prefix + pip, log, env=env, check=False)
    if rc != 0:
        # setup.py's own message when it stopped the build, else the end of pip's output.
        start = out.find("torch_lstm_grad: ")
        message = out[start:].split("[end of output]")[0] if start >= 0 else out[-1500:]
        raise RuntimeError(
            "the build stopped:\n"
            + "\n".join(line.strip() for line in message.strip().splitlines())
        )
    compiled = _compiled(out)
    return {
        "seconds": round(seconds, 1),
        "compiled": [os.path.relpath(o, ROOT) for o in compiled],
        "ninja_no_work": "ninja: no work to do" in out,
        "note": note,
    }


def _torch_version(python: str, log) -> str:
    code = "import torch, sys; print(torch.__version__, sys.implementation.cache_tag)"
    return _sh([python, "-c", code], log)[1].strip().splitlines()[-1].split()  # after warnings


def run_version(spec: str, args, log) -> dict:
    version, _, config = spec.partition(":")
    env = {**os.environ, "TORCH_LSTM_GRAD_FORCE_CPU": "1"} if config == "cpu" else None
    venv = os.path.join(args.venvs, f"torch-{version}")
    python = os.path.join(venv, "bin", "python")
    result: dict = {"requested": spec, "venv": venv}
    if args.fresh and os.path.isdir(venv) and venv not in args.created:
        shutil.rmtree(venv)
    args.created.add(venv)  # 2.10.0 and 2.10.0:cpu share one venv
    if not os.path.isdir(venv):
        _sh([sys.executable, "-m", "venv", venv], log)
        _sh([python, "-m", "pip", "install", f"torch=={version}"], log)
    torch_before, tag = _torch_version(python, log)
    for stale in glob.glob(os.path.join(ROOT, "build", f"{tag}-torch{torch_before}-*")):
        shutil.rmtree(stale)
    prefix = shlex.split(args.build_wrapper)
    result["first_build"] = _build(venv, prefix, env, log)
    result["torch"] = _torch_version(python, log)[0]
    result["pip_kept_torch"] = result["torch"] == torch_before
    result["second_build"] = _build(venv, prefix, env, log)
    os.utime(os.path.join(ROOT, TOUCHED))
    result["after_touching"] = {"file": TOUCHED, **_build(venv, prefix, env, log)}
    # The test tools only now, so that the builds ran in a venv with nothing but torch.
    tools = ["pytest", "expecttest"] + (["tensorflow-cpu==2.21.*"] if args.tf else [])
    _sh([python, "-m", "pip", "install", *tools], log)
    result["pip_kept_torch"] &= _torch_version(python, log)[0] == torch_before
    doctor = _sh([os.path.join(venv, "bin", "torch-lstm-grad"), "doctor", "--json"], log)[1]
    report = json.loads(doctor[doctor.index("{") :])
    built = report["extension"]["built"]
    result["doctor"] = {
        "with_cuda": built["WITH_CUDA"],
        "archs": built.get("CUDA_ARCHS"),
        "cuda_toolkit": built.get("CUDA_TOOLKIT"),
        "cudnn": built.get("CUDNN"),
        "matches_torch": report["extension"]["matches_torch"],
    }
    if args.cuobjdump and built["WITH_CUDA"]:
        elf = _sh([args.cuobjdump, "--list-elf", "--list-ptx", report["extension"]["so"]], log)[1]
        result["cuobjdump"] = sorted(set(re.findall(r"\.(sm_\d+)\.(cubin|ptx)", elf)))
    rc, out, seconds = _sh(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], log, check=False
    )
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    result["tests"] = {
        "rc": rc,
        "summary": summary[-1] if summary else None,
        "seconds": round(seconds),
    }
    return result


def _condense(error: str) -> str:
    """setup.py's message without pip's epilogue, or a compile failure's compiler errors."""
    lines = error.split("error: subprocess-exited-with-error")[0].strip().splitlines()
    compiler = [line for line in lines if re.search(r":\d+:\d+: error: ", line)]
    if compiler:
        lines = lines[:2] + ["..."] + list(dict.fromkeys(compiler))
    return "\n".join(lines)


def _markdown(results: list[dict], meta: dict) -> str:
    lines = [
        f"# torch versions: build and test, {meta['date']}",
        "",
        f"`{meta['command']}` on {meta['machine']}; Python {meta['python']}, "
        f"{meta['compiler']}, nvcc on PATH: {meta['nvcc']}. No GPU: CUDA kernels are compiled "
        "and loaded (the ops register), never run. Every command's output: "
        f"`build/{meta['log']}` (not committed).",
        "",
        "| torch | pip kept it | compiled | first build | second build | after touching one file "
        "| tests |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['requested']} | | | {r['error'].splitlines()[0]} (below) | | | |")
            continue
        d, b1, b2, b3 = r["doctor"], r["first_build"], r["second_build"], r["after_touching"]
        no_work = " (ninja: no work to do)" if b2["ninja_no_work"] else ""
        what = f"CPU + CUDA, archs {d['archs']}" if d["with_cuda"] else "CPU only"
        if r["requested"].endswith(":cpu"):
            what += " (`TORCH_LSTM_GRAD_FORCE_CPU=1`)"
        if r.get("cuobjdump"):
            what += " (cuobjdump: " + ", ".join(f"{a} {k}" for a, k in r["cuobjdump"]) + ")"
        lines.append(
            f"| {r['torch']} | {'yes' if r['pip_kept_torch'] else 'NO'} | {what} "
            f"| {len(b1['compiled'])} files, {b1['seconds']} s "
            f"| {len(b2['compiled'])} files{no_work}, {b2['seconds']} s "
            f"| {len(b3['compiled'])} file, {b3['seconds']} s "
            f"| {r['tests']['summary']} |"
        )
    notes = [
        f"- {r['torch']}: {r['first_build']['note']}"
        for r in results
        if r.get("first_build", {}).get("note")
    ]
    if notes:
        lines += ["", "Notes:", *notes]
    for r in results:
        if "error" in r:
            lines += ["", f"torch {r['requested']}:", "", "```", _condense(r["error"]), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "versions",
        nargs="*",
        default=["2.11.0", "2.13.0", "2.15.0"],
        help="torch versions; VERSION:cpu builds with TORCH_LSTM_GRAD_FORCE_CPU=1",
    )
    parser.add_argument("--venvs", default=os.path.join(ROOT, "build", "torch-venvs"))
    parser.add_argument("--fresh", action="store_true", help="recreate existing venvs")
    parser.add_argument("--tf", action="store_true", help="also install TensorFlow (test oracle)")
    parser.add_argument("--cuobjdump", help="path of cuobjdump, to list the .so's GPU code")
    parser.add_argument(
        "--build-wrapper", default="", help="command prefix for the builds, e.g. 'nice -n 10'"
    )
    parser.add_argument(
        "--out", help="report path (default benchmarks/results/torch-versions-DATE.md)"
    )
    parser.add_argument("--render", metavar="JSON", help="only rewrite the report of a JSON")
    args = parser.parse_args(argv)
    args.created = set()
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        with open(os.path.splitext(args.render)[0] + ".md", "w") as f:
            f.write(_markdown(data["results"], data["meta"]))
        return 0
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "benchmarks", "results", f"torch-versions-{date}.md")
    os.makedirs(args.venvs, exist_ok=True)
    # Every command's full output (pip -v, ninja, pytest): megabytes, kept out of git in build/.
    log_path = os.path.join(ROOT, "build", os.path.basename(os.path.splitext(out)[0]) + ".log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    results = []
    with open(log_path, "w") as log:
        for version in args.versions:
            print(f"torch {version} ...", file=sys.stderr, flush=True)
            try:
                results.append(run_version(version, args, log))
            except RuntimeError as err:
                results.append({"requested": version, "error": str(err)})
            print(json.dumps(results[-1], indent=1), file=sys.stderr, flush=True)
        nvcc = shutil.which("nvcc")
        meta = {
            "date": date,
            "log": os.path.basename(log_path),
            "command": "python release/torch_versions.py " + shlex.join(sys.argv[1:]),
            "machine": f"{os.cpu_count()} CPUs",
            "python": sys.version.split()[0],
            "compiler": _sh(["c++", "--version"], log)[1].splitlines()[0],
            "nvcc": (_sh([nvcc, "--version"], log)[1].strip().splitlines()[-2] if nvcc else "none"),
        }
    with open(out, "w") as f:
        f.write(_markdown(results, meta))
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print(f"wrote {out}", file=sys.stderr)
    return 0 if all("error" not in r and r["tests"]["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
