"""The repository's own shape, as docs/development.md states it: a README a user reads in one
sitting; code, docs and tests that speak of the project (no work log, no tracker numbers, no
notes outside the repository); a curated results folder; a package whose modules import in one
direction and use no other file's private names; and every `docs/` page the code cites present."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from tests.helpers import REPO_ROOT

ROOT = Path(REPO_ROOT)
PACKAGE = ROOT / "torch_lstm_grad"
THIS = Path(__file__).resolve()

# Narration: the words of a work log, where a document should state what holds.
NARRATION = [
    (r"\b[Ii]ssues? ?#?\d+\b", "a tracker number"),
    (
        r"\b(?:first|second|third|\w+th|\w+-\w+(?:st|nd|rd|th)|this|that|next|previous|last|"
        r"earlier|later) (?:work )?sessions?\b",
        "a work session",
    ),
    (r"\bsessions? \d+\b", "a work session"),
    (r"\b(?:before|after) (?:this|the last|these) changes?\b", "a change's history"),
    (r"\(was[: ]\s*\d", "a past figure"),
    # the notes the project was specified from live outside the repository
    (r"tf_semantics\.md|cudnn_notes\.md|extension_style\.md|\bSPEC\.md\b", "an outside note"),
]
_TEXT = (".py", ".md", ".txt", ".toml", ".cfg", ".cpp", ".h", ".cu", ".cuh", ".sh", ".yml", "")
_BINARY_DIRS = ("tests/data/",)


def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        # an unpacked source tree without git: every file but the build outputs
        skip = {".git", "build", "dist", "__pycache__", ".venv"}
        return [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]
    return out.split()


def _text_files() -> list[Path]:
    out = []
    for f in _tracked():
        path = ROOT / f
        if f.startswith(_BINARY_DIRS) or path.resolve() == THIS or not path.is_file():
            continue
        if path.suffix in _TEXT and (path.suffix or path.parent.name == ".ci"):
            out.append(path)
    return out


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the rest belongs in docs/"


def test_no_work_log_in_code_docs_or_tests():
    hits = []
    for path in _text_files():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for pattern, what in NARRATION:
                if re.search(pattern, line):
                    hits.append(f"{path.relative_to(ROOT)}:{i}: {what}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_results_folder_is_curated():
    results = ROOT / "benchmarks" / "results"
    files = [p for p in results.rglob("*") if p.is_file()]
    assert len(files) <= 40, f"{len(files)} files in benchmarks/results (at most 40)"
    logs = [p.name for p in files if p.suffix == ".log"]
    assert not logs, f"run logs belong in build/, not benchmarks/results: {logs}"


def _modules() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_package else parts)] = (f, is_package)
    return mods


def _imports(mods):
    """module -> [(imported module, names imported from it, line)] over every import of the
    package's own modules, function-level ones included."""
    out = {}
    for name, (path, is_package) in mods.items():
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith(PACKAGE.name):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.append((sub if sub in mods else target, alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                found += [
                    (a.name, None, node.lineno)
                    for a in node.names
                    if a.name.startswith(PACKAGE.name)
                ]
        out[name] = found
    return out


def test_package_imports_have_no_cycle():
    mods = _modules()
    edges = {m: set() for m in mods}
    for m, found in _imports(mods).items():
        for target, _, _ in found:
            while target not in mods and "." in target:
                target = target.rsplit(".", 1)[0]
            # a module reading its own package's __init__ names is the package's own business
            if target in mods and target != m and not m.startswith(target + "."):
                edges[m].add(target)
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t) :] + [t]))
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = "done"

    for m in sorted(mods):
        if m not in state:
            visit(m, [])
    assert not cycles, "\n".join(cycles)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_used_across_files():
    mods = _modules()
    hits = []
    for m, found in _imports(mods).items():
        path = mods[m][0]
        modules = set()
        for target, alias, line in found:
            if alias is None or target == f"{m.rsplit('.', 1)[0]}.{alias}" or target in mods:
                modules.add(alias or target.split(".")[0])
            if alias and _private(alias) and alias != "_C":
                hits.append(f"{path.relative_to(ROOT)}:{line}: imports {alias}")
        # a module imported whole, and then one of its private names read
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                hits.append(
                    f"{path.relative_to(ROOT)}:{node.lineno}: reads {node.value.id}.{node.attr}"
                )
    assert not hits, "\n".join(hits)


_CITED = re.compile(r"\bdocs/([\w.-]+\.md)")


def test_cited_docs_exist():
    missing = set()
    for path in _text_files():
        for page in _CITED.findall(path.read_text(encoding="utf-8")):
            if not (ROOT / "docs" / page).is_file():
                missing.add(f"{path.relative_to(ROOT)} cites docs/{page}")
    assert not missing, "\n".join(sorted(missing))
