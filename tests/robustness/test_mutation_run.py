"""harness/mutation_run.py --merge: two runs made from one copy of the results, each on its
own mutants, merge without either's stale copy of the other's records winning: each run
contributes only the records it changed since the copy was made (merged one run at a time, a
run's unchanged copy of the other's records would overwrite the other's new ones)."""

import importlib.util
import os

from tests.helpers import REPO_ROOT

_PATH = os.path.join(REPO_ROOT, "harness", "mutation_run.py")


def _mutation_run():
    spec = importlib.util.spec_from_file_location("mutation_run", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_run_contributes_only_what_it_changed():
    base = {"a": {"status": "survived"}, "b": {"status": "survived"}}
    run_a = {"a": {"status": "survived", "confirmed": True}, "b": base["b"]}
    run_b = {"a": base["a"], "b": {"status": "killed"}}
    into = dict(base, c={"status": "killed"})  # a record committed after the runs' copy
    n = _mutation_run().merge_runs(into, base, [run_a, run_b])
    assert n == 2
    assert into == {
        "a": {"status": "survived", "confirmed": True},
        "b": {"status": "killed"},
        "c": {"status": "killed"},
    }
