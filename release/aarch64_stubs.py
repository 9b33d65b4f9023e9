"""Stand-ins for the CUDA libraries that torch's aarch64 wheel links, so that its CPU side loads
on a machine without them (release/aarch64_emulated_check.sh, under qemu-user).

torch's aarch64 wheels on PyPI are CUDA builds: libtorch_cpu.so and libtorch_cuda.so name
libcudart, libcublas, libcudnn and others as needed libraries, which come from NVIDIA's wheels,
not published for aarch64 on every index. For each such library that is neither in torch/lib nor
in the sysroot, this writes a shared library of that soname which defines every symbol the wheel's
libraries take from it, with the same symbol versions. Each symbol is a function returning a
pointer to a zeroed buffer: a CUDA call then fails with a non-zero code, and torch reports no GPU
(`torch.cuda.is_available()` is False). Symbols that name no version go into one more library,
to be preloaded. Nothing here runs on the CPU path the tests exercise.

    python3 release/aarch64_stubs.py TORCH_LIB SYSROOT_LIB... OUT_DIR
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

READELF = "aarch64-linux-gnu-readelf"
CC = "aarch64-linux-gnu-gcc"
UNVERSIONED = "libtlg_unversioned_stub.so"


def _readelf(*args: str) -> str:
    return subprocess.run([READELF, *args], capture_output=True, text=True, check=True).stdout


def _is_elf(path: str) -> bool:
    """Not a linker script (the sysroot's libc.so is one) nor a directory."""
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _dynamic_symbols(path: str):
    """(name, version or None, defined) of each global dynamic symbol."""
    for line in _readelf("--dyn-syms", "-W", path).splitlines():
        p = line.split()
        if len(p) < 8 or p[4] not in ("GLOBAL", "WEAK"):
            continue
        name, _, version = p[7].partition("@")
        yield name, version.lstrip("@").split()[0] if version else None, p[6] != "UND"


def _version_files(path: str) -> dict[str, str]:
    """Each version node the library needs -> the file that defines it."""
    nodes, current = {}, None
    for line in _readelf("-V", path).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            current = m.group(1)
        m = re.search(r"Name: (\S+)", line)
        if m and current:
            nodes[m.group(1)] = current
    return nodes


def _build(out: str, soname: str, symbols: dict[str, str | None]) -> None:
    src = os.path.join(out, soname + ".c")
    with open(src, "w") as f:
        f.write("#include <stdlib.h>\n#include <unistd.h>\n")
        f.write("static char zeros[65536] __attribute__((aligned(64)));\n")
        for name in sorted(symbols):
            # TLG_STUB_LOG=1 names each call: what to look at if a load or a call fails.
            f.write(
                f'long {name}(void) {{ if (getenv("TLG_STUB_LOG")) write(2, "stub {name}\\n", '
                f"{len(name) + 6}); return (long)zeros; }}\n"
            )
    cmd = [CC, "-shared", "-fPIC", "-O1", "-w", "-o", os.path.join(out, soname), src,
           f"-Wl,-soname,{soname}"]  # fmt: skip
    nodes = sorted({v for v in symbols.values() if v})
    if nodes:
        script = os.path.join(out, soname + ".map")
        with open(script, "w") as f:
            for node in nodes:
                names = "".join(f"  {s};\n" for s, v in sorted(symbols.items()) if v == node)
                f.write(f"{node} {{\n global:\n{names} }};\n")
        cmd.append(f"-Wl,--version-script={script}")
    subprocess.run(cmd, check=True)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    torch_lib, sysroots, out = argv[0], argv[1:-1], argv[-1]
    os.makedirs(out, exist_ok=True)
    present = set(os.listdir(torch_lib))
    for d in sysroots:
        present |= set(os.listdir(d))
    libs = [os.path.join(torch_lib, f) for f in sorted(os.listdir(torch_lib)) if ".so" in f]
    libs = [f for f in libs if _is_elf(f)]
    system = [os.path.join(d, f) for d in sysroots for f in os.listdir(d) if ".so" in f]
    defined = set()
    for path in libs + [f for f in system if _is_elf(f)]:
        defined |= {n for n, _, is_def in _dynamic_symbols(path) if is_def}
    wanted: dict[str, dict[str, str | None]] = {}
    unversioned: dict[str, str | None] = {}
    for path in libs:
        needed = re.findall(r"NEEDED.*\[(.*)\]", _readelf("-d", path))
        for lib in needed:
            if lib not in present:
                wanted.setdefault(lib, {})
        files = _version_files(path)
        for name, version, is_def in _dynamic_symbols(path):
            if is_def:
                continue
            if version and files.get(version) in wanted:
                wanted[files[version]][name] = version
            elif not version and name not in defined and not re.match(r"_?Py", name):
                unversioned[name] = None
    for lib, symbols in sorted(wanted.items()):
        _build(out, lib, symbols)
    _build(out, UNVERSIONED, unversioned)
    print(f"aarch64_stubs: {len(wanted)} libraries stood in for ({', '.join(sorted(wanted))}); "
          f"{len(unversioned)} unversioned symbols in {UNVERSIONED}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
