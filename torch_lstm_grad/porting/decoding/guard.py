"""What a corrupt or hostile file makes go wrong inside a reader, turned into one ValueError that
names the file and what failed (the CLI prints it on one line and exits 2).

Each reader checks what it reads before trusting it (lengths and offsets against the file's
size, nesting depth, checksums); what a library it hands the bytes to raises on bad input
(h5py, zipfile, json, TensorFlow's checkpoint reader, torch.load) is translated at the reader's
boundary by `reading`. Only exceptions raised *inside* one of the named libraries are
translated: one raised by this package's own code (a KeyError, a TypeError) is a bug and stays a
traceback, and MemoryError is never hidden.
"""

from __future__ import annotations

import contextlib
import os
import re

__all__ = ["CorruptFile", "reading"]

# A library's frames: its package directory in a path, or for the standard library's modules
# their file name (zipfile is a package from Python 3.12).
_LIBRARY_FILES = {
    "h5py": ("h5py",),
    "zipfile": ("zipfile.py", "zipfile"),
    "json": ("json",),
    "tensorflow": ("tensorflow", "tsl"),
    "torch": ("torch",),
    "zlib": ("zlib",),
}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours in a library's message
_UNPICKLER = "WeightsUnpickler error:"


class CorruptFile(ValueError):
    """A file that is not what it claims to be; the message names the file and the check."""


def _raised_in(err: BaseException, libraries) -> bool:
    """Whether the innermost Python frame of `err`'s traceback belongs to one of `libraries`
    (an exception a C extension raises has its Python caller as innermost frame). Called on
    a caught exception, which always has a traceback."""
    tb = err.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    parts = os.path.normpath(tb.tb_frame.f_code.co_filename).split(os.sep)
    for lib in libraries:
        for name in _LIBRARY_FILES.get(lib, (lib,)):
            if name in parts:
                return True
    return False


def _first_line(err: BaseException) -> str:
    text = _ANSI.sub("", str(err)).strip()
    if isinstance(err, KeyError) and len(err.args) == 1:  # KeyError's str() quotes its key
        text = str(err.args[0])
    for line in text.splitlines():
        # torch.load(weights_only=True) opens with how to load the file unsafely; what the
        # file holds is on a line of its own (`Unsupported global: GLOBAL x.Y was not ...`)
        if line.strip().startswith(_UNPICKLER):
            return line.strip().removeprefix(_UNPICKLER).strip().split(". Please")[0][:300]
    return text.splitlines()[0][:300] if text else ""


@contextlib.contextmanager
def reading(path, what: str, libraries=()):
    """Runs a reader's body: a ValueError or NotImplementedError that does not name `path` gets
    `"{path}: {what}: "` in front (its type kept: NotImplementedError says what is not supported,
    not what is broken); an exception raised inside one of `libraries` becomes CorruptFile
    naming the file, `what` and the library's message."""
    path = os.fspath(path)
    try:
        yield
    except MemoryError:
        raise
    except NotImplementedError as err:
        if path in str(err):
            raise
        raise NotImplementedError(f"{path}: {what}: {err}") from err
    except ValueError as err:
        if path in str(err).split("\n", 1)[0]:
            raise
        if type(err) is ValueError or isinstance(err, (CorruptFile, UnicodeError)):
            raise CorruptFile(f"{path}: {what}: {_first_line(err)}") from err
        if _raised_in(err, libraries) or type(err).__module__ == "json.decoder":
            raise CorruptFile(f"{path}: {what} ({type(err).__name__}: {_first_line(err)})") from err
        raise  # a ValueError subclass of this package (Refused): its message stands
    except Exception as err:
        if not _raised_in(err, libraries):
            raise
        raise CorruptFile(f"{path}: {what} ({type(err).__name__}: {_first_line(err)})") from err
