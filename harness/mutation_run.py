"""Mutation testing of the Python layers: plant one refactor-like bug at a time in a
copy of the package, run the tests that reach it, and report the mutants no test kills.

    python harness/mutation_run.py                       # every file of FILES, then a report
    python harness/mutation_run.py --files torch_lstm_grad/keras_layers/recurrent.py
    python harness/mutation_run.py --list --files torch_lstm_grad/modules.py
    python harness/mutation_run.py --show 'modules.py#12'       # the mutant's diff
    python harness/mutation_run.py --only 'modules.py#12' --tests tests/modules/test_modules.py
    python harness/mutation_run.py --report /tmp/mutation-report.md
    python harness/mutation_run.py --results benchmarks/results/mutation-results.json \
        --merge /tmp/mutA.json /tmp/mutB.json --base <the commit the runs copied it from>

The working tree is never written: the package (with its built `_C.abi3.so`), tests/,
examples/ and pyproject.toml are copied to a scratch directory (`--scratch`, default
/tmp/torch_lstm_grad_mutation); each mutant is written into the copy, run, and the original
put back. A persistent parent process imports torch, TensorFlow and Keras once and forks a
child per run, which imports the package from the copy (its `__file__` is checked) and runs
pytest in-process (`-x`, `-p no:cacheprovider`, a per-mutant timeout, OMP_NUM_THREADS=1); so a
mutant costs its tests plus ~2 s, not a fresh interpreter's ~6 s. One child at a time.

Which tests run: a coverage pass records, per test of the file's selection (FILES), the lines
of each target file it executes (sys.settrace, in-process; cached per test file under the
scratch directory, keyed by the sources' hash); a mutant runs the tests that execute its
statement, fastest first, and `-x` stops at the first failure. A statement executed at
import (module constants, signatures' defaults) runs the whole selection. A mutant on a line no
test of the selection executes is reported `uncovered` without running. Subprocesses
(`convert_without_tf`) are not traced: `--confirm` reruns every survivor on its file's whole
selection.

Mutations (AST, each a one-line change a refactor could make): adjacent call arguments or
keyword values swapped; adjacent tuple/list elements swapped (targets too: `h, c = states`);
a returned tuple's element replaced by its neighbour; a constant subscript changed (`[-1]` ->
`[0]`, `[0]` -> `[1]`); comparisons flipped (`<` / `<=`, `==` / `!=`, `is` / `is not`, `in` /
`not in`); `and` / `or`; constants (True / False, 0 / 1, n -> n + 1); `not` removed; a flag
condition negated; a self-update statement (`x = x.flip(0)`), augmented assignment or call
statement dropped; `.flip()` / `.t()` / `.transpose()` / `.detach()` / `reversed()` and the
like dropped; an attribute replaced by a sibling read on the same object in the same function
(`out.h` / `out.cs`, `self.return_state` / `self.return_sequences`); a local name replaced by
a one-letter-different sibling (`h0` / `c0`, `fw` / `bw`); `+` / `-`, `*` / `/`. Not mutated:
strings, f-strings, docstrings, annotations, `raise` and `assert` statements (error text),
`extra_repr` / `__repr__`, warnings and prints.

Equivalent mutants are listed in harness/mutation_equivalents.txt, one `KEY  # reason` a
line, KEY as printed by --list (file::function::description); the report counts them apart.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EQUIVALENTS = os.path.join(REPO, "harness", "mutation_equivalents.txt")

# The tests written to kill the run's survivors and the state tests, in the files of the modules
# they test, first in every selection: the fast, targeted ones.
_FIRST_TESTS = [
    "tests/ops/test_ops_defaults.py",
    "tests/ops/test_raw_ops_conversion.py",
    "tests/porting/describe/test_statements.py",
    "tests/porting/test_build.py",
    "tests/porting/test_convert.py",
    "tests/keras_layers/test_recurrent.py",
    "tests/modules/test_modules.py",
    "tests/layouts/test_layouts.py",
    "tests/ops/test_autograd.py",
    "tests/porting/describe/test_tf1_cells.py",
    "tests/porting/graphs/test_tf1_cells.py",
]
_KERAS_TESTS = [
    *_FIRST_TESTS,
    "tests/porting/test_keras.py",
    "tests/ops/test_ops_gru_variants.py",
    "tests/ops/integration/test_gru_variants.py",
    "tests/ops/test_ops_lstm_variants.py",
    "tests/ops/integration/test_lstm_variants.py",
    "tests/porting/test_keras2.py",
]
_MODULE_TESTS = [
    *_FIRST_TESTS,
    "tests/ops/test_ops_lstm_variants.py",
    "tests/ops/integration/test_lstm_variants.py",
    "tests/ops/test_ops_gru_variants.py",
    "tests/ops/integration/test_gru_variants.py",
    "tests/ops/test_raw_ops_gru_block_cell.py",
    "tests/ops/test_ops_inference.py",
    "tests/ops/integration/test_inference.py",
    "tests/ops/test_raw_ops_accuracy.py",
    "tests/porting/test_tf1.py",
]
_PORTING_TESTS = [
    *_FIRST_TESTS,
    "tests/porting/test_keras.py",
    "tests/porting/test_keras2.py",
    "tests/porting/test_tf1.py",
    "tests/porting/test_saved_model.py",
    "tests/porting/test_source.py",
    "tests/porting/decoding/test_proto.py",
    "tests/porting/decoding/test_guard.py",
    "tests/porting/formats/test_tensorbundle.py",
    "tests/porting/formats/test_checkpoint.py",
    "tests/porting/formats/test_object_graph.py",
    "tests/porting/formats/test_frozen_graph.py",
    "tests/porting/formats/test_saved_model.py",
    "tests/porting/graphs/test_graph_def.py",
    "tests/porting/describe/test_keras_rnn.py",
    "tests/robustness/test_saved_model_tampered.py",
    "tests/robustness/test_saved_model_loop_context.py",
    # the one reader of a SavedModel layer's graph_io (what --verify feeds and fetches); last,
    # as it runs TF on each file
    "tests/porting/test_verify.py",
]
# The readers of the files users hold (byte formats, protobufs, graphs) and the converter around
# them: every porting test reads its file through them; the fuzz tests feed them hostile bytes.
_READER_TESTS = [
    *_PORTING_TESTS[:-1],
    "tests/robustness/test_fuzz_readers.py",
    _PORTING_TESTS[-1],
]
_OP_TESTS = [
    *_FIRST_TESTS,
    "tests/ops/test_ops_lstm_variants.py",
    "tests/ops/integration/test_lstm_variants.py",
    "tests/ops/test_ops_gru_variants.py",
    "tests/ops/integration/test_gru_variants.py",
    "tests/ops/test_raw_ops_gru_block_cell.py",
    "tests/ops/test_raw_ops_lstm_block.py",
    "tests/ops/test_ops_inference.py",
    "tests/ops/integration/test_inference.py",
    "tests/ops/test_reference.py",
    "tests/ops/test_raw_ops_accuracy.py",
    "tests/ops/test_raw_ops_bad_input.py",
    "tests/tf_ported/test_tf_ported_lstm_ops.py",
    "tests/tf_ported/test_tf_ported_gru_ops.py",
    "tests/tf_ported/test_tf_ported_cudnn_rnn.py",
    # the CudnnRNNBackprop* raw ops and the ops' shape functions are called by these only
    "tests/ops/test_raw_ops_cudnn_rnn.py",
    "tests/ops/integration/test_cudnn_rnn.py",
    "tests/tf_ported/test_tf_ported_shape_fns.py",
]


def _led_by(selection: list[str], *first: str) -> list[str]:
    """`selection` with the test files `first` at its head (each once)."""
    return [*first, *(t for t in selection if t not in first)]


# The Keras layer modules and the whole-model port: checked against Keras 3 and tf_keras running
# the same layers and models.
_WHOLE_MODEL_TESTS = [
    *_FIRST_TESTS,
    "tests/keras_layers/test_core.py",
    "tests/keras_layers/test_normalization.py",
    "tests/keras_layers/test_convolutional.py",
    "tests/keras_layers/test_reshaping.py",
    "tests/keras_layers/test_merging.py",
    "tests/keras_layers/test_wrappers.py",
    "tests/porting/test_whole_model.py",
    "tests/porting/test_published_models.py",
]


# Target file -> its test selection: the layers that compute first, then the porting pipeline,
# the ops, and the readers.
FILES = {
    "torch_lstm_grad/keras_layers/recurrent.py": _KERAS_TESTS,
    "torch_lstm_grad/modules.py": _MODULE_TESTS,
    "torch_lstm_grad/packed_weights.py": _MODULE_TESTS,
    **{
        f"torch_lstm_grad/keras_layers/{name}.py": _WHOLE_MODEL_TESTS
        for name in (
            "base", "activations", "core", "normalization", "convolutional", "reshaping",
            "merging", "wrappers", "operations", "custom", "model",
        )
    },  # fmt: skip
    "torch_lstm_grad/porting/describe/keras_model.py": _WHOLE_MODEL_TESTS,
    "torch_lstm_grad/porting/build/keras_model.py": _WHOLE_MODEL_TESTS,
    "torch_lstm_grad/porting/build/__init__.py": _PORTING_TESTS,
    "torch_lstm_grad/porting/build/context.py": _PORTING_TESTS,
    "torch_lstm_grad/porting/build/keras_rnn.py": _PORTING_TESTS,
    "torch_lstm_grad/porting/build/tf1_cells.py": _PORTING_TESTS,
    "torch_lstm_grad/porting/describe/keras_rnn.py": _PORTING_TESTS,
    "torch_lstm_grad/porting/describe/tf1_cells.py": _PORTING_TESTS,
    "torch_lstm_grad/porting/graphs/keras_loops.py": _PORTING_TESTS,
    "torch_lstm_grad/layouts.py": _led_by(
        [
            *_FIRST_TESTS,
            "tests/ops/test_ops_lstm_variants.py",
            "tests/ops/integration/test_lstm_variants.py",
        ],
        "tests/layouts/test_layouts.py",
    ),
    "torch_lstm_grad/autograd.py": _OP_TESTS,
    "torch_lstm_grad/ops.py": _OP_TESTS,
    "torch_lstm_grad/raw_ops.py": _OP_TESTS,
    **{
        f"torch_lstm_grad/porting/{name}.py": _READER_TESTS
        for name in (
            "describe/statements",
            "source",
            "decoding/guard",
            "formats/frozen_graph",
            "formats/object_graph",
            "describe/description",
            "formats/checkpoint",
            "decoding/proto",
            "convert",
            "formats/saved_model",
            "verify",
        )
    },  # fmt: skip
    # checked first against protobuf's own text parser, HDF5's own addresses, TF's own
    # checksums, OrderedCode and string tensors, the weights Keras holds, and TF's own reading
    # of graphs
    "torch_lstm_grad/porting/decoding/textproto.py": _led_by(
        _READER_TESTS, "tests/porting/decoding/test_textproto.py"
    ),
    "torch_lstm_grad/porting/formats/hdf5_check.py": _led_by(
        _READER_TESTS, "tests/porting/formats/test_hdf5_check.py"
    ),
    "torch_lstm_grad/porting/formats/tensorbundle.py": _led_by(
        _READER_TESTS, "tests/porting/formats/test_tensorbundle.py"
    ),
    "torch_lstm_grad/porting/formats/keras_files.py": _led_by(
        _READER_TESTS, "tests/porting/formats/test_keras_files.py"
    ),
    "torch_lstm_grad/porting/graphs/graph_def.py": _led_by(
        _READER_TESTS,
        "tests/porting/graphs/test_graph_def.py",
        "tests/porting/graphs/test_tf1_cells.py",
    ),
    "torch_lstm_grad/porting/graphs/tf1_cells.py": _led_by(
        _READER_TESTS,
        "tests/porting/graphs/test_tf1_cells.py",
        "tests/porting/graphs/test_graph_def.py",
    ),
}

SKIP_FUNCS = {"extra_repr", "__repr__", "__str__"}
SKIP_CALLS = {"print", "warn", "warning", "info", "debug"}
DROP_METHODS = {"flip", "t", "transpose", "detach", "clone", "contiguous", "squeeze", "unsqueeze"}
FLIP_CMP = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}  # fmt: skip
FLIP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
COMMUTATIVE_CALLS = {"max", "min"}


# -- mutants -------------------------------------------------------------------------------------


class Mutant:
    """One planted bug: the byte span of `node` in the file replaced by `text`."""

    def __init__(self, file, qual, op, desc, span, text, lines):
        self.file, self.qual, self.op, self.desc = file, qual, op, desc
        self.span, self.text, self.lines = span, text, lines
        self.id = ""
        self.key = ""

    def apply(self, source: bytes) -> bytes:
        lines = source.split(b"\n")
        (l0, c0), (l1, c1) = self.span
        head = b"\n".join(lines[: l0 - 1] + [lines[l0 - 1][:c0]])
        tail = b"\n".join([lines[l1 - 1][c1:]] + lines[l1:])
        return head + self.text.encode() + tail


def _src(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _copy(node):
    # a deep copy, not a reparse: a subscript's tuple of slices (`x[:, a:b]`) is no expression
    # on its own
    return copy.deepcopy(node) if isinstance(node, ast.expr) else node


class _Collector(ast.NodeVisitor):
    def __init__(self, file: str, tree: ast.Module):
        self.file, self.mutants = file, []
        self.qual: list[str] = []
        self.stmt_lines: list[set[int]] = [set()]
        self.skip = 0
        self.modules = set()  # names bound by imports: torch.cat is no sibling of torch.zeros
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
            if isinstance(parent, (ast.Import, ast.ImportFrom)):
                self.modules.update((a.asname or a.name).split(".")[0] for a in parent.names)
        self.func_attrs: dict[str, set[str]] = {}
        self.func_names: set[str] = set()

    # context ---------------------------------------------------------------------------------

    def _add(self, op, desc, node, new, stmt=False):
        if self.skip:
            return
        if stmt:
            text = new
        else:
            text = new if isinstance(new, str) else f"({ast.unparse(new)})"
        span = ((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))
        qual = ".".join(self.qual) or "<module>"
        self.mutants.append(Mutant(self.file, qual, op, desc, span, text, self.stmt_lines[-1]))

    @contextlib.contextmanager
    def _skipping(self, cond=True):
        self.skip += bool(cond)
        try:
            yield
        finally:
            self.skip -= bool(cond)

    def _visit_function(self, node):
        self.qual.append(node.name)
        attrs: dict[str, set[str]] = {}
        names: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                parent = self.parents.get(sub)
                called = isinstance(parent, ast.Call) and parent.func is sub
                if isinstance(sub.ctx, ast.Load) and not called:
                    attrs.setdefault(sub.value.id, set()).add(sub.attr)
            if isinstance(sub, ast.Name):
                names.add(sub.id)
        saved = self.func_attrs, self.func_names
        self.func_attrs, self.func_names = attrs, names - self.modules
        # The signature (defaults) runs at import; the body when called.
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        with self._skipping(node.name in SKIP_FUNCS):
            self.stmt_lines.append(set(range(first, max(first, node.body[0].lineno - 1) + 1)))
            for d in node.decorator_list:
                self.visit(d)
            self.visit(node.args)
            self.stmt_lines.pop()
            for stmt in node.body:
                self.visit(stmt)
        self.func_attrs, self.func_names = saved
        self.qual.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node):
        self.qual.append(node.name)
        self.generic_visit(node)
        self.qual.pop()

    def visit_arg(self, node):  # annotations
        return

    def visit(self, node):
        if isinstance(node, ast.stmt):
            return self._visit_stmt(node)
        return super().visit(node)

    def _visit_stmt(self, node):
        if isinstance(node, (ast.Raise, ast.Assert, ast.Import, ast.ImportFrom)):
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # docstring
        if isinstance(node, ast.AnnAssign):
            node = ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno,
                              col_offset=node.col_offset, end_lineno=node.end_lineno,
                              end_col_offset=node.end_col_offset)  # fmt: skip
            if node.value is None:
                return
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return
        body_fields = ("body", "orelse", "finalbody", "handlers")
        first_body = min(
            (s.lineno for f in body_fields for s in getattr(node, f, []) or []), default=None
        )
        end = node.end_lineno if first_body is None else max(node.lineno, first_body - 1)
        self.stmt_lines.append(set(range(node.lineno, end + 1)))
        self._stmt_mutants(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.stmt_lines.pop()
            return super().visit(node)
        for field, value in ast.iter_fields(node):
            if field in body_fields:
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    self.visit(child)
        self.stmt_lines.pop()
        for field in body_fields:
            for child in getattr(node, field, []) or []:
                self.visit(child)

    def _stmt_mutants(self, node):
        drop = False
        if isinstance(node, ast.AugAssign):
            drop = True
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            targets = {n.id for n in ast.walk(node.targets[0]) if isinstance(n, ast.Name)}
            used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            drop = bool(targets & used)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            drop = _call_name(node.value) not in SKIP_CALLS
        if drop:
            self._add("drop-stmt", f"drop `{_src(node)}`", node, "pass", stmt=True)
        if isinstance(node, (ast.If, ast.While)):
            self._negate(node.test)

    def _negate(self, test):
        if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
            self._add("negate", f"`{_src(test)}` -> `not ...`", test,
                      ast.UnaryOp(op=ast.Not(), operand=test))  # fmt: skip

    # expressions -----------------------------------------------------------------------------

    def visit_JoinedStr(self, node):
        return

    def visit_Call(self, node):
        name = _call_name(node)
        if name in SKIP_CALLS:
            return
        args = node.args
        if name not in COMMUTATIVE_CALLS and not any(isinstance(a, ast.Starred) for a in args):
            for i in range(len(args) - 1):
                if ast.dump(args[i]) != ast.dump(args[i + 1]):
                    new = _copy(node)
                    new.args[i], new.args[i + 1] = new.args[i + 1], new.args[i]
                    self._add("swap-args", f"swap args `{_src(args[i])}` <-> "
                              f"`{_src(args[i + 1])}` of {name}()", node, new)  # fmt: skip
        kws = [k for k in node.keywords if k.arg is not None]
        for a, b in zip(kws, kws[1:], strict=False):
            if ast.dump(a.value) != ast.dump(b.value):
                new = _copy(node)
                ka = next(k for k in new.keywords if k.arg == a.arg)
                kb = next(k for k in new.keywords if k.arg == b.arg)
                ka.value, kb.value = kb.value, ka.value
                self._add("swap-kwargs", f"swap {a.arg}= <-> {b.arg}= of {name}()", node, new)
        if isinstance(node.func, ast.Attribute) and node.func.attr in DROP_METHODS:
            self._add("drop-call", f"drop .{node.func.attr}() of `{_src(node.func.value)}`",
                      node, node.func.value)  # fmt: skip
        if name == "reversed" and len(args) == 1:
            self._add("drop-call", "drop reversed()", node, args[0])
        self.generic_visit(node)

    def _seq(self, node):
        parent = self.parents.get(node)
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            return  # membership: order is irrelevant
        if isinstance(parent, ast.Call) and _call_name(parent) == "isinstance":
            return
        if isinstance(parent, ast.ExceptHandler):
            return
        elts = node.elts
        if any(isinstance(e, ast.Starred) for e in elts[1:-1]):
            return
        if not self.qual or self.qual[-1][:1].isupper():
            # A module or class constant of names (`ACTIVATIONS = ("sigmoid", ...)`) is a set
            # of choices: its order is no behaviour.
            if all(isinstance(e, ast.Constant) and isinstance(e.value, (str, type(None)))
                   for e in elts):  # fmt: skip
                return
        # A subscript's tuple (`x[:, 0]`) is rewritten as the whole subscript: `(:, 0)` alone
        # is no expression.
        in_slice = isinstance(parent, ast.Subscript) and parent.slice is node
        for i in range(min(len(elts) - 1, 6)):
            if ast.dump(elts[i]) != ast.dump(elts[i + 1]):
                if in_slice:
                    where = parent
                    new = _copy(parent) if isinstance(parent.ctx, ast.Load) else None
                    if new is None:
                        continue
                    seq = new.slice
                else:
                    where = node
                    new = seq = _copy(node) if isinstance(node.ctx, ast.Load) else _copy_store(node)
                seq.elts[i], seq.elts[i + 1] = seq.elts[i + 1], seq.elts[i]
                self._add("swap-elts", f"swap `{_src(elts[i])}` <-> `{_src(elts[i + 1])}`",
                          where, new)  # fmt: skip
        if self._in_return(node) and isinstance(node.ctx, ast.Load):
            for i in range(1, len(elts)):
                # a starred element is neither replaced nor copied (`(*a, b)` -> `(*a)` is no
                # expression)
                if (
                    ast.dump(elts[i]) != ast.dump(elts[i - 1])
                    and not isinstance(elts[i], ast.Starred)
                    and not isinstance(elts[i - 1], ast.Starred)
                ):
                    new = _copy(node)
                    new.elts[i] = _copy(elts[i - 1])
                    self._add("dup-elt", f"returned `{_src(elts[i])}` -> "
                              f"`{_src(elts[i - 1])}`", node, new)  # fmt: skip
        self.generic_visit(node)

    visit_Tuple = visit_List = _seq

    def _in_return(self, node):
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.Return):
                return True
            if isinstance(node, ast.stmt):
                return False
        return False

    def visit_Subscript(self, node):
        value = _int_value(node.slice)
        if value is not None:
            new_value = {0: 1, 1: 0, -1: 0}.get(value, value + 1)
            new = _copy(node) if isinstance(node.ctx, ast.Load) else None
            if new is not None:
                new.slice = ast.Constant(new_value)
                self._add("index", f"`{_src(node)}` -> [{new_value}]", node, new)
            self.visit(node.value)
            return
        self.generic_visit(node)

    def visit_Compare(self, node):
        for i, op in enumerate(node.ops):
            flip = FLIP_CMP.get(type(op))
            if flip is not None:
                new = _copy(node)
                new.ops[i] = flip()
                self._add("compare", f"`{_src(node)}`: {type(op).__name__} -> "
                          f"{flip.__name__}", node, new)  # fmt: skip
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        new = _copy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        self._add("boolop", f"`{_src(node)}`: {type(node.op).__name__} -> "
                  f"{type(new.op).__name__}", node, new)  # fmt: skip
        self.generic_visit(node)

    def visit_BinOp(self, node):
        flip = FLIP_BIN.get(type(node.op))
        strings = any(
            isinstance(s, ast.JoinedStr)
            or (isinstance(s, ast.Constant) and isinstance(s.value, str))
            for s in (node.left, node.right)
        )
        if flip is not None and not strings:
            new = _copy(node)
            new.op = flip()
            self._add("arith", f"`{_src(node)}`: {type(node.op).__name__} -> "
                      f"{flip.__name__}", node, new)  # fmt: skip
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            self._add("not", f"drop `not` of `{_src(node.operand)}`", node, node.operand)
        self.generic_visit(node)

    def visit_IfExp(self, node):
        self._negate(node.test)
        self.generic_visit(node)

    def visit_Constant(self, node):
        parent = self.parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            return
        v = node.value
        if isinstance(v, bool):
            new = not v
        elif isinstance(v, int):
            new = {0: 1, 1: 0}.get(v, v + 1)
        elif isinstance(v, float):
            new = {0.0: 1.0, 1.0: 0.0}.get(v, v + 1.0)
        else:
            return
        self._add("const", f"{v!r} -> {new!r}", node, ast.Constant(new))

    def visit_Attribute(self, node):
        self.visit(node.value)
        if not (isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name)):
            return
        base = node.value.id
        parent = self.parents.get(node)
        if base in self.modules or (isinstance(parent, ast.Call) and parent.func is node):
            return
        group = sorted(self.func_attrs.get(base, set()) - {node.attr})
        if not group:
            return
        best = max(group, key=lambda a: _similarity(a, node.attr))
        if base == "self" and _similarity(best, node.attr) == 0:
            return
        new = ast.Attribute(value=ast.Name(id=base, ctx=ast.Load()), attr=best, ctx=ast.Load())
        self._add("attr", f"`{base}.{node.attr}` -> `{base}.{best}`", node, new)

    def visit_Name(self, node):
        if not isinstance(node.ctx, ast.Load) or node.id in self.modules:
            return
        siblings = sorted(
            n for n in self.func_names
            if n != node.id and n != "_" and len(n) == len(node.id)
            and sum(a != b for a, b in zip(n, node.id, strict=True)) == 1
        )  # fmt: skip
        if siblings and not (len(node.id) == 1 and not node.id.isupper()):
            self._add("name", f"`{node.id}` -> `{siblings[0]}`", node,
                      ast.Name(id=siblings[0], ctx=ast.Load()))  # fmt: skip


def _copy_store(node):
    text = ast.unparse(node)
    target = ast.parse(f"{text} = None").body[0].targets[0]
    return target


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "?"


def _int_value(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def _similarity(a: str, b: str) -> int:
    pre = len(os.path.commonprefix([a, b]))
    suf = len(os.path.commonprefix([a[::-1], b[::-1]]))
    return max(pre, suf)


def mutants_of(file: str, source: bytes) -> list[Mutant]:
    tree = ast.parse(source)
    c = _Collector(file, tree)
    for stmt in tree.body:
        c.visit(stmt)
    original = ast.dump(tree)
    out, seen = [], {}
    short = file.rsplit("/", 1)[-1]
    for m in sorted(c.mutants, key=lambda m: (m.span, m.op, m.desc)):
        try:
            mutated = ast.parse(m.apply(source))
        except SyntaxError:
            continue
        if ast.dump(mutated) == original:
            continue
        base = f"{file}::{m.qual}::{m.desc}"
        seen[base] = seen.get(base, 0) + 1
        m.key = base if seen[base] == 1 else f"{base} #{seen[base]}"
        m.id = f"{short}#{len(out)}"
        out.append(m)
    return out


# -- the scratch copy and the forked children -----------------------------------------------------


def make_scratch(scratch: str) -> None:
    if os.path.exists(scratch):
        shutil.rmtree(scratch)
    os.makedirs(scratch)
    # harness/: the fuzz tests run its harness (fuzz_readers.py) from the copy.
    for part in ("torch_lstm_grad", "tests", "examples", "harness"):
        shutil.copytree(os.path.join(REPO, part), os.path.join(scratch, part),
                        ignore=shutil.ignore_patterns("__pycache__", "results"))  # fmt: skip
    shutil.copy(os.path.join(REPO, "pyproject.toml"), scratch)


def _sources_hash(scratch: str) -> str:
    h = hashlib.sha256()
    pkg = os.path.join(scratch, "torch_lstm_grad")
    for root, _, files in sorted(os.walk(pkg)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(root, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


class _Recorder:
    """pytest plugin of a child: the first failing test, and (coverage pass) per-test lines
    and durations."""

    def __init__(self, targets=None):
        self.failed = None
        self.outcomes: dict[str, str] = {}
        self.durations: dict[str, float] = {}
        self.lines: dict[str, dict[str, set[int]]] = {}
        self.targets = targets or {}
        self.current = self.lines.setdefault("<import>", {})

    def pytest_runtest_logreport(self, report):
        if report.failed and self.failed is None:
            self.failed = report.nodeid
        if report.when == "call" or report.failed or report.skipped:
            prev = self.outcomes.get(report.nodeid)
            if prev != "failed":
                self.outcomes[report.nodeid] = report.outcome
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration

    def pytest_runtest_protocol(self, item, nextitem):
        self.current = self.lines.setdefault(item.nodeid, {})

    # sys.settrace: a local tracer only in the target files' frames
    def global_trace(self, frame, event, arg):
        path = self.targets.get(frame.f_code.co_filename)
        if path is None:
            return None
        seen = self.current.setdefault(path, set())

        def local(frame, event, arg):
            if event == "line":
                seen.add(frame.f_lineno)
            return local

        seen.add(frame.f_lineno)
        return local


def _use_scratch(scratch):
    os.chdir(scratch)
    sys.path.insert(0, scratch)  # the package and `tests` (the suite's helpers: tests.helpers)
    os.environ["PYTHONPATH"] = scratch + os.pathsep + os.environ.get("PYTHONPATH", "")


# A warm server has imported the unmutated package; its children drop every module of it but
# these (the loaded extension, the op registrations and what they hold: never executed twice)
# and import the rest again from the mutated copy. So a file these hold runs cold.
_KEPT = {"_C", "_extension", "_registrations", "autograd", "_checks", "_cudnn", "_build_info"}
COLD = {"torch_lstm_grad/autograd.py"}


def _child(scratch, pytest_args, result_path, log_path, coverage_targets=None, warm=False):
    """In a forked child: import the copy, run pytest, write the result, never return."""
    rc = 99
    try:
        os.setpgid(0, 0)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if warm:
            for name in [n for n in sys.modules if n.split(".")[0] == "torch_lstm_grad"]:
                if name.split(".", 1)[-1] not in _KEPT:
                    del sys.modules[name]
            import torch_lstm_grad  # noqa: F401 - again, from the mutated copy
        else:
            _use_scratch(scratch)
        import pytest

        targets = None
        if coverage_targets is not None:
            targets = {os.path.join(scratch, f): f for f in coverage_targets}
        rec = _Recorder(targets)
        if targets is not None:
            sys.settrace(rec.global_trace)
            import threading

            threading.settrace(rec.global_trace)
        rc = int(pytest.main(pytest_args, plugins=[rec]))
        sys.settrace(None)
        import torch_lstm_grad

        here = os.path.dirname(os.path.abspath(torch_lstm_grad.__file__))
        out = {
            "rc": rc,
            "failed": rec.failed,
            "package": here,
            "outcomes": rec.outcomes,
            "durations": rec.durations,
        }
        if targets is not None:
            out["lines"] = {
                t: {f: sorted(ls) for f, ls in per.items()} for t, per in rec.lines.items()
            }
        with open(result_path, "w") as fh:
            json.dump(out, fh)
    except BaseException as err:  # noqa: BLE001 - the child must exit, whatever happened
        with contextlib.suppress(Exception):
            print(f"mutation_run child: {err!r}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def _fork_and_wait(start, timeout):
    """Forks `start()` (which never returns) and waits: (exit status or None on timeout)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        start()
    _CHILD[0] = pid
    deadline = time.monotonic() + timeout
    while True:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            _CHILD[0] = 0
            return st
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # the child's own group: it and its children
            os.waitpid(pid, 0)
            _CHILD[0] = 0
            return None
        time.sleep(0.02)


class _WarmServer:
    """A forked process holding the unmutated package; per request it forks a child that
    re-imports the package's modules (the mutated one among them) and runs pytest."""

    def __init__(self, scratch):
        self.scratch = scratch
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        sys.stdout.flush()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.req_w)
            os.close(self.resp_r)
            self._serve(req_r, resp_w)
        os.close(req_r)
        os.close(resp_w)
        self.requests = os.fdopen(self.req_w, "w", buffering=1)
        self.responses = os.fdopen(self.resp_r, "r")
        _SERVER[0] = self.pid
        if json.loads(self.responses.readline()).get("ready") is not True:
            raise SystemExit("the warm server did not start")

    def _serve(self, req_r, resp_w):
        rc = 0
        try:
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _use_scratch(self.scratch)
            import torch_lstm_grad

            assert torch_lstm_grad.__file__.startswith(self.scratch), torch_lstm_grad.__file__
            requests, responses = os.fdopen(req_r, "r"), os.fdopen(resp_w, "w", buffering=1)
            responses.write(json.dumps({"ready": True}) + "\n")
            for line in requests:
                r = json.loads(line)
                st = _fork_and_wait(
                    lambda r=r: _child(self.scratch, r["args"], r["result"], r["log"],
                                       warm=True),
                    r["timeout"],
                )  # fmt: skip
                code = None if st is None else os.waitstatus_to_exitcode(st)
                responses.write(json.dumps({"exit": code}) + "\n")
        except BaseException:  # noqa: BLE001 - the server must exit, whatever happened
            rc = 1
        finally:
            os._exit(rc)

    def run(self, args, result_path, log_path, timeout):
        self.requests.write(json.dumps({"args": args, "result": result_path, "log": log_path,
                                        "timeout": timeout}) + "\n")  # fmt: skip
        line = self.responses.readline()
        if not line:
            raise SystemExit("the warm server died")
        return json.loads(line)["exit"]

    def close(self):
        self.requests.close()
        os.waitpid(self.pid, 0)
        _SERVER[0] = 0


_SERVER = [0]


def run_child(scratch, pytest_args, timeout, coverage_targets=None, server=None):
    """(result dict or None, 'timeout' or None); one child at a time."""
    work = os.path.join(scratch, ".mutation")
    os.makedirs(work, exist_ok=True)
    result_path = os.path.join(work, "result.json")
    log_path = os.path.join(work, "child.log")
    with contextlib.suppress(FileNotFoundError):
        os.remove(result_path)
    if server is not None:
        code = server.run(pytest_args, result_path, log_path, timeout)
        if code is None:
            return None, "timeout"
    else:
        st = _fork_and_wait(
            lambda: _child(scratch, pytest_args, result_path, log_path, coverage_targets),
            timeout,
        )
        if st is None:
            return None, "timeout"
        code = os.waitstatus_to_exitcode(st)
    try:
        with open(result_path) as fh:
            return json.load(fh), None
    except (FileNotFoundError, json.JSONDecodeError):
        return {"rc": code, "failed": None}, None


def _pytest_args(scratch, tests):
    return ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
            "-W", "ignore", "--basetemp", os.path.join(scratch, ".mutation", "tmp"),
            *tests]  # fmt: skip


# -- coverage --------------------------------------------------------------------------------------


def coverage(scratch: str, test_files: list[str], targets: list[str]) -> dict:
    """{test file: {"lines": {nodeid: {target: [lines]}}, "durations": ..., "failed": [...]}},
    cached per test file under scratch/.mutation/cov, keyed by the sources' and the test file's
    hashes."""
    cov_dir = os.path.join(REPO_CACHE, "cov")
    os.makedirs(cov_dir, exist_ok=True)
    src_hash = _sources_hash(scratch)
    out = {}
    for tf in test_files:
        if not os.path.exists(os.path.join(scratch, tf)):
            continue
        with open(os.path.join(scratch, tf), "rb") as fh:
            tf_hash = hashlib.sha256(fh.read()).hexdigest()[:16]
        cache = os.path.join(cov_dir, f"{tf.replace('/', '_')}-{src_hash}-{tf_hash}.json")
        if os.path.exists(cache):
            with open(cache) as fh:
                out[tf] = json.load(fh)
            continue
        t0 = time.time()
        args = [a for a in _pytest_args(scratch, [tf]) if a != "-x"]
        res, why = run_child(scratch, args, 3600, coverage_targets=ALL_TARGETS)
        if res is None or "lines" not in res:
            raise SystemExit(f"coverage pass of {tf} failed ({why}); see {scratch}/.mutation")
        failed = [t for t, o in res["outcomes"].items() if o == "failed"]
        out[tf] = {"lines": res["lines"], "durations": res["durations"], "failed": failed}
        with open(cache, "w") as fh:
            json.dump(out[tf], fh)
        print(f"  coverage {tf}: {len(res['outcomes'])} tests, {len(failed)} failing "
              f"unmutated (left out), {time.time() - t0:.0f} s", flush=True)  # fmt: skip
    return out


REPO_CACHE = ""
ALL_TARGETS = list(FILES)
_CHILD = [0]  # the running child, ended with the parent on SIGTERM / SIGINT


def _stop(signum, frame):
    for pid in (_CHILD[0], _SERVER[0]):
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    raise SystemExit(f"stopped by signal {signum}")  # unwinds run_mutant's restore


def select_tests(m: Mutant, cov: dict, test_files: list[str]) -> list[str] | None:
    """Node ids executing the mutant's statement, fastest first; every test of the selection
    when the import executes it; None when nothing does."""
    chosen, durations, everything = [], {}, []
    imported = False
    for tf in test_files:
        if tf not in cov:
            continue
        data = cov[tf]
        failing = set(data["failed"])
        for nodeid, per in data["lines"].items():
            lines = set(per.get(m.file, ()))
            if nodeid == "<import>":
                imported = imported or bool(lines & m.lines)
                continue
            if nodeid in failing:
                continue
            everything.append(nodeid)
            durations[nodeid] = data["durations"].get(nodeid, 0.0)
            if lines & m.lines:
                chosen.append(nodeid)
    if imported:
        # A module-level statement (a constant, a table) reaches every test through the import,
        # not only the tests that happened to import the module afresh (a reload).
        chosen = everything
    if not chosen:
        return None
    return sorted(set(chosen), key=lambda n: durations.get(n, 0.0))


# -- running -------------------------------------------------------------------------------------


def load_results(path):
    if os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    return {}


def save_results(path, results):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def merge_runs(into: dict, base: dict, runs: list[dict]) -> int:
    """Writes into `into` every record a run changed since `base`, the results its copy was made
    from, and returns how many. A run's copy also holds the other runs' files as they were at
    `base`: taken whole, or compared with a newer `into`, those stale records would overwrite
    the other runs' new ones (efc651a lost confirmations this way)."""
    n = 0
    for run in runs:
        for key, rec in run.items():
            if base.get(key) != rec:
                into[key] = rec
                n += 1
    return n


def load_equivalents() -> dict[str, str]:
    eq = {}
    if os.path.exists(EQUIVALENTS):
        with open(EQUIVALENTS, encoding="utf-8") as fh:
            for line in fh:
                line = line.rstrip("\n")
                if not line.strip() or line.startswith("#"):
                    continue
                key, _, why = line.partition("  # ")
                eq[key.strip()] = why.strip()
    return eq


def run_mutant(scratch, m: Mutant, original: bytes, tests, timeout, server=None):
    path = os.path.join(scratch, m.file)
    with open(path, "wb") as fh:
        fh.write(m.apply(original))
    try:
        res, why = run_child(scratch, _pytest_args(scratch, tests), timeout, server=server)
    finally:
        with open(path, "wb") as fh:
            fh.write(original)
    if why == "timeout":
        return "killed", "timeout"
    pkg = res.get("package")
    if pkg is not None and not pkg.startswith(scratch):
        raise SystemExit(f"the child imported {pkg}, not the scratch copy: stopping")
    rc = res["rc"]
    if rc == 0:
        return "survived", None
    if rc == 5:
        return "error", "no tests ran"
    return "killed", res.get("failed") or f"exit {rc}"


def main(argv=None) -> int:
    global REPO_CACHE
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", nargs="*", default=list(FILES))
    p.add_argument("--scratch", default="/tmp/torch_lstm_grad_mutation")
    p.add_argument("--results", default=None, help="JSON of results (default: in --scratch)")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument("--show", help="print one mutant's diff and exit")
    p.add_argument("--only", nargs="*", help="mutant ids or keys to run")
    p.add_argument("--tests", nargs="*", help="run these tests (not the coverage selection)")
    p.add_argument("--status", nargs="*", help="rerun the results' mutants of these statuses")
    p.add_argument("--recheck", action="store_true",
                   help="rerun mutants killed by a test that is no longer collected")  # fmt: skip
    p.add_argument("--confirm", action="store_true",
                   help="rerun survivors on their file's whole selection")  # fmt: skip
    p.add_argument("--sample", type=float, default=1.0,
                   help="fraction of each file's mutants, drawn with --seed")  # fmt: skip
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant")
    p.add_argument("--report", help="write the markdown report here from the results")
    p.add_argument("--no-copy", action="store_true", help="reuse the scratch copy as it is")
    p.add_argument("--merge", nargs="+", metavar="RUN_JSON",
                   help="merge these runs' results into --results, then exit")  # fmt: skip
    p.add_argument("--base", help="with --merge: the commit whose --results the runs copied")
    p.add_argument("--cold", action="store_true",
                   help="a fresh import of the package per mutant (no warm server)")  # fmt: skip
    args = p.parse_args(argv)
    scratch = os.path.abspath(args.scratch)
    results_path = args.results or os.path.join(scratch + "-results.json")
    REPO_CACHE = scratch + "-cache"
    if args.merge:
        if not (args.results and args.base):
            p.error("--merge needs --results (the file to merge into) and --base (the commit "
                    "whose copy of it the runs started from)")  # fmt: skip
        import subprocess

        rel = os.path.relpath(os.path.abspath(results_path), REPO)
        base = json.loads(subprocess.check_output(["git", "show", f"{args.base}:{rel}"], cwd=REPO))
        results = load_results(results_path)
        n = merge_runs(results, base, [load_results(r) for r in args.merge])
        save_results(results_path, results)
        print(f"{results_path}: {n} records merged from {len(args.merge)} runs", flush=True)
        return 0

    sources = {}
    for f in FILES:
        with open(os.path.join(REPO, f), "rb") as fh:
            sources[f] = fh.read()
    mutants = {f: mutants_of(f, sources[f]) for f in args.files}
    by_id = {m.id: m for ms in mutants.values() for m in ms}
    by_id.update({m.key: m for ms in mutants.values() for m in ms})

    if args.list:
        for f, ms in mutants.items():
            print(f"{f}: {len(ms)} mutants")
            for m in ms:
                print(f"  {m.id:22} L{m.span[0][0]:<4} {m.key}")
        return 0
    if args.show:
        m = by_id[args.show]
        import difflib

        new = m.apply(sources[m.file]).decode().splitlines()
        old = sources[m.file].decode().splitlines()
        print(f"{m.id}  {m.key}")
        print("\n".join(difflib.unified_diff(old, new, m.file, m.file + " (mutant)", n=2,
                                             lineterm="")))  # fmt: skip
        return 0

    results = load_results(results_path)
    if args.report:
        write_report(args.report, results, mutants)
        return 0

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    if not args.no_copy or not os.path.exists(scratch):
        make_scratch(scratch)
    # What every child needs, imported once here (never the package itself: each child
    # imports it from the mutated copy).
    t0 = time.time()
    import keras  # noqa: F401
    import numpy  # noqa: F401
    import pytest  # noqa: F401
    import tensorflow  # noqa: F401
    import torch  # noqa: F401

    assert "torch_lstm_grad" not in sys.modules
    print(f"parent: torch, TensorFlow, Keras imported in {time.time() - t0:.1f} s", flush=True)

    chosen = list(mutants.items())
    if args.only:
        wanted = [by_id[k] for k in args.only]
        chosen = [(f, [m for m in wanted if m.file == f]) for f in mutants]
    elif args.status:
        chosen = [(f, [m for m in ms if results.get(m.key, {}).get("status") in args.status])
                  for f, ms in mutants.items()]  # fmt: skip
    elif args.recheck:
        # Killed by a test that no longer exists (renamed, rewritten): run again. "gpu:" marks a
        # kill seen on a GPU machine by a CUDA test (skipped here, so not in this coverage).
        chosen = []
        for f, ms in mutants.items():
            cov = coverage(scratch, FILES[f], ALL_TARGETS)
            ids = {t for data in cov.values() for t in data["lines"]}

            def stale(r, ids=ids):
                killer = r.get("killer") or ""
                return not (killer in ids or killer.startswith(("timeout", "exit", "gpu:")))

            chosen.append((f, [m for m in ms if results.get(m.key, {}).get("status") == "killed"
                               and stale(results[m.key])]))  # fmt: skip
    elif args.confirm:
        chosen = [(f, [m for m in ms if results.get(m.key, {}).get("status")
                       in ("survived", "uncovered")]) for f, ms in mutants.items()]  # fmt: skip
    elif args.sample < 1.0:
        rng = random.Random(args.seed)
        chosen = [(f, sorted(rng.sample(ms, round(len(ms) * args.sample)),
                             key=lambda m: int(m.id.split("#")[1])))
                  for f, ms in mutants.items()]  # fmt: skip

    for f, ms in chosen:
        if not ms:
            continue
        test_files = FILES[f]
        print(f"{f}: {len(ms)} mutants, tests {' '.join(test_files)}", flush=True)
        cov = None if args.tests else coverage(scratch, test_files, ALL_TARGETS)
        server = None if f in COLD or args.cold else _WarmServer(scratch)
        killers: dict[str, list[str]] = {}
        t_file = time.time()
        for m in ms:
            done = results.get(m.key)
            fresh = not (args.only or args.status or args.confirm or args.tests or args.recheck)
            if fresh and done and done.get("source") == _hash(sources[f]):
                continue
            if args.tests:
                tests = args.tests
            elif args.confirm:
                tests = [t for t in test_files]
            else:
                tests = select_tests(m, cov, test_files)
                # The tests that killed this function's mutants first (mutmut's heuristic).
                first = killers.get(m.qual, [])
                if tests is not None:
                    tests = [t for t in first if t in tests] + [t for t in tests if t not in first]
            t0 = time.time()
            if tests is None:
                status, killer = "uncovered", None
            else:
                status, killer = run_mutant(scratch, m, sources[f], tests, args.timeout, server)
                if status == "killed" and killer in tests:
                    seen = killers.setdefault(m.qual, [])
                    if killer in seen:
                        seen.remove(killer)
                    seen.insert(0, killer)
            rec = {
                "id": m.id, "file": f, "line": m.span[0][0], "op": m.op, "desc": m.desc,
                "status": status, "killer": killer, "tests": 0 if tests is None else len(tests),
                "seconds": round(time.time() - t0, 1), "source": _hash(sources[f]),
            }  # fmt: skip
            if args.tests:
                rec["only_tests"] = args.tests
            if args.confirm:
                rec["confirmed"] = True
            if not args.tests:
                results[m.key] = rec
                save_results(results_path, results)
            print(f"  {m.id:22} {status:9} {rec['seconds']:6.1f}s  L{rec['line']:<4} "
                  f"{m.desc}  {killer or ''}", flush=True)  # fmt: skip
        if server is not None:
            server.close()
        print(f"{f}: done in {time.time() - t_file:.0f} s", flush=True)
    return 0


def _hash(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()[:16]


def write_report(path, results, mutants) -> None:
    """The per-file table (mutants run of those generated, killed, equivalent, survived,
    uncovered, score = killed / (run - equivalent)), then the equivalents with their reasons
    and any survivor, as markdown. Only the results of each file's current source count (a
    record of an edited file's earlier source says nothing about the file as it is)."""
    eq = load_equivalents()
    lines = ["| file | mutants run (of generated) | killed | equivalent | survived | uncovered "
             "| score |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    survivors, equivalents = [], []
    totals = [0, 0, 0, 0, 0, 0]
    for f, ms in mutants.items():
        with open(os.path.join(REPO, f), "rb") as fh:
            current = _hash(fh.read())
        recs = [(m, results.get(m.key)) for m in ms]
        recs = [(m, r) for m, r in recs if r is not None and r["source"] == current]
        if not recs:
            continue
        killed = sum(r["status"] == "killed" for _, r in recs)
        equal = [(m, r) for m, r in recs if r["status"] != "killed" and m.key in eq]
        left = [(m, r) for m, r in recs if r["status"] != "killed" and m.key not in eq]
        surv = sum(r["status"] != "uncovered" for _, r in left)
        unc = sum(r["status"] == "uncovered" for _, r in left)
        denom = len(recs) - len(equal)
        score = f"{100.0 * killed / denom:.1f}%" if denom else "-"
        lines.append(f"| {f} | {len(recs)} ({len(ms)}) | {killed} | {len(equal)} | {surv} | "
                     f"{unc} | {score} |")  # fmt: skip
        for k, v in enumerate((len(recs), len(ms), killed, len(equal), surv, unc)):
            totals[k] += v
        survivors += left
        equivalents += equal
    run, gen, killed, equal, surv, unc = totals
    denom = run - equal
    score = f"{100.0 * killed / denom:.1f}%" if denom else "-"
    lines.append(f"| all | {run} ({gen}) | {killed} | {equal} | {surv} | {unc} | {score} |")
    text = "\n".join(lines) + "\n"
    if equivalents:
        text += "\nEquivalent mutants (harness/mutation_equivalents.txt):\n\n"
        for m, r in equivalents:
            where = m.key.split("::", 1)[1]
            text += f"- `{m.file.rsplit('/', 1)[-1]}` L{r['line']} `{where}`: {eq[m.key]}\n"
    if survivors:
        text += "\nSurvivors (neither killed nor equivalent):\n\n"
        text += "\n".join(f"- `{m.key}` ({r['status']}, L{r['line']})" for m, r in survivors)
        text += "\n"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
