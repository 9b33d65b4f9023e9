"""The sha256 of what the compiled extension is built from (setup.py, the build environment
probe, every file under csrc/): benchmarks/gpu_prebuild.sh records it beside a prebuilt .so and
release/gpu_check.sh refuses a prebuilt .so whose sources differ from the tree it runs in.

    python release/sources_hash.py [ROOT]    (prints the hash; ROOT: the repository root)
"""

import hashlib
import pathlib
import sys


def sources_hash(root: pathlib.Path) -> str:
    files = [root / "setup.py", root / "torch_lstm_grad" / "tools" / "build_env.py"]
    files += sorted(p for p in (root / "csrc").rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


if __name__ == "__main__":
    here = pathlib.Path(__file__).resolve().parent.parent
    print(sources_hash(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else here))
