"""Loading ``torch_lstm_grad._C``: the .so uses PyTorch's C++ ABI, so it only loads into the
torch it was compiled against. ``setup.py`` records that torch in ``_build_info.py``; the
version is compared before the .so is loaded, so a torch upgrade gives an error that says to
rebuild instead of an undefined-symbol traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

import torch

REBUILD = "pip install --no-build-isolation -e .   (in the torch_lstm_grad source tree)"


def build_info() -> types.ModuleType | None:
    """What setup.py recorded when it built the .so; None if it never ran here."""
    try:
        return importlib.import_module("torch_lstm_grad._build_info")
    except ImportError:
        return None


def so_path() -> str | None:
    spec = importlib.util.find_spec("torch_lstm_grad._C")
    return spec.origin if spec else None


def mismatch(info: types.ModuleType | None) -> str | None:
    """Why the built .so cannot load into the running torch, or None."""
    if info is None:
        return None
    if info.TORCH_VERSION != torch.__version__:
        return (
            f"torch_lstm_grad's extension ({so_path()}) was built against torch "
            f"{info.TORCH_VERSION}, but torch {torch.__version__} is installed: PyTorch's C++ "
            f"ABI changes between versions. Rebuild it against this torch:\n    {REBUILD}"
        )
    # The same version string from another commit (a source build, a prebuilt .so carried to
    # another machine): the ABI can differ just the same.
    built_git = getattr(info, "TORCH_GIT_VERSION", None)
    here_git = torch.version.git_version
    if built_git and here_git and "Unknown" not in (built_git, here_git) and built_git != here_git:
        return (
            f"torch_lstm_grad's extension ({so_path()}) was built against torch "
            f"{info.TORCH_VERSION} from commit {built_git}, but the installed torch "
            f"{torch.__version__} is from commit {here_git}. Rebuild it against this torch:"
            f"\n    {REBUILD}"
        )
    return None


def load_error() -> str | None:
    """Imports ``torch_lstm_grad._C`` (which registers the ops); returns why it cannot, or None."""
    problem = mismatch(build_info())
    if problem is not None:
        return problem
    if so_path() is None:
        return (
            "torch_lstm_grad's compiled extension (torch_lstm_grad._C) is not built. Build it "
            f"against the installed torch {torch.__version__} with\n    {REBUILD}"
        )
    try:
        importlib.import_module("torch_lstm_grad._C")
    except ImportError as err:
        return (
            f"torch_lstm_grad's extension ({so_path()}) does not load into torch "
            f"{torch.__version__}: {err}\nIt was probably built against another torch. Rebuild "
            f"it against this one with\n    {REBUILD}"
        )
    return None


def doctor_requested() -> bool:
    """Whether this process is ``torch-lstm-grad doctor`` (or ``python -m torch_lstm_grad
    doctor``), the one command that must run when the extension cannot load."""
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    return sys.argv[1:2] == ["doctor"] and (
        program.startswith("torch-lstm-grad") or program in ("-m", "__main__.py")
    )


def load() -> None:
    """Loads the extension or raises ImportError saying what to do."""
    problem = load_error()
    if problem is not None:
        raise ImportError(problem)
