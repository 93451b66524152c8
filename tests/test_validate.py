"""The validator's acceptance rules, each shown with a hand-written inversion on a real fixture.

The inversions run against inventory-app as the session crawl built and measured it (its
healthy sandbox and recorded healthy state are reused, nothing is mocked): a break that fails,
one that edits protected code, one that breaks nothing, one that kills the whole suite, one
that leaves a backup of what it corrupted, a fix that does nothing, and a break whose effect
is random. A correct break with a correct fix is validated, as the control.
"""

from __future__ import annotations

import base64
from dataclasses import replace
import shlex
from pathlib import Path

import pytest
from conftest import FIXTURES

from miner.install import build_spec
from miner.models import Candidate, Inversion, Target
from miner.sandbox.local import LocalBackend
from miner.sources import fetch, parse_source
from miner.store import Store
from miner.validate import Context, healthy_manifest, validate

DATA = "inventory/data/products.csv"
KILL_PTH = '"$MINER_SITE_PACKAGES/zz-miner-test-kill.pth"'


@pytest.fixture(scope="module")
def ctx(mined_store: Path) -> Context:
    """inventory-app's healthy sandbox and state, as the session crawl left them."""
    store = Store(mined_store, create=False)
    project = fetch(parse_source(str(FIXTURES / "inventory-app"), FIXTURES), store.cache_root / "sources")
    state = store.healthy(project.key)
    assert state is not None and len(state.passing) > 2
    backend = LocalBackend()
    env = backend.build(project, build_spec(project), store.work_root / project.key)  # reused, not rebuilt
    return Context(backend, env, state, healthy_manifest(backend, env), timeout=300)


def inversion(break_script: str, fix_script: str = "true", type_id: str = "data/truncate") -> Inversion:
    family = type_id.split("/")[0]
    return Inversion(type_id=type_id, family=family, target=Target(kind="data", name=DATA, path=DATA),
                     break_script=f"set -euo pipefail\n{break_script}\n",
                     fix_script=f"set -euo pipefail\n{fix_script}\n",
                     summary="written by hand for a validator test")


def restore_data() -> str:
    """A fix that embeds the original data file (a fix must not rely on a copy in the sandbox)."""
    original = base64.encodebytes((FIXTURES / "inventory-app" / DATA).read_bytes()).decode()
    return f"base64 -d > \"$MINER_PROJECT/{DATA}\" <<'B64'\n{original}B64"


def rejected(candidate: Candidate, rule: str) -> None:
    assert (candidate.status, candidate.rule) == ("rejected", rule), (candidate.rule, candidate.detail)


def test_a_failing_break_script_is_rejected(ctx: Context) -> None:
    candidate = validate(ctx, inversion("echo nothing to break here >&2\nexit 1"))
    rejected(candidate, "break-failed")
    assert "exited 1" in candidate.detail and "nothing to break here" in candidate.logs["break"]


def test_a_break_that_edits_protected_code_is_rejected(ctx: Context) -> None:
    candidate = validate(ctx, inversion('printf "\\n# edited\\n" >> "$MINER_PROJECT/inventory/money.py"'))
    rejected(candidate, "protected-changed")
    assert "inventory/money.py" in candidate.detail


def test_a_break_that_breaks_nothing_is_rejected(ctx: Context) -> None:
    rejected(validate(ctx, inversion("touch /sandbox/home/harmless")), "no-f2p")


def test_a_break_that_kills_the_whole_suite_is_kept_only_as_its_own_kind(ctx: Context) -> None:
    kill = f'printf "import os; os._exit(3)\\n" > {KILL_PTH}'  # every start of the venv's Python dies
    heal = f"rm -f {KILL_PTH}"
    rejected(validate(ctx, inversion(kill, heal, "deps/bad-pth")), "no-p2p")
    labelled = validate(ctx, inversion(kill, heal, "deps/bad-pth"), whole_suite_ok=True)
    assert labelled.status == "validated", labelled.detail
    assert labelled.f2p == ctx.state.passing and labelled.p2p == []


def test_a_backup_of_the_corrupted_file_is_an_answer_leak(ctx: Context) -> None:
    corrupt = f'F="$MINER_PROJECT/{DATA}"\ncp "$F" /sandbox/home/backup.csv\nprintf "sku,name\\n\\xff\\xfe" > "$F"'
    candidate = validate(ctx, inversion(corrupt, restore_data(), "data/corrupt-bytes"))
    rejected(candidate, "answer-leaked")
    assert "/sandbox/home/backup.csv" in candidate.detail and DATA in candidate.detail


def test_a_fix_that_does_nothing_is_rejected_and_a_real_fix_is_validated(ctx: Context) -> None:
    corrupt = f'printf "sku,name\\n\\xff\\xfe" > "$MINER_PROJECT/{DATA}"'
    failed = validate(ctx, inversion(corrupt, "true", "data/corrupt-bytes"))
    rejected(failed, "fix-failed")
    assert "still fail after the fix" in failed.detail
    good = validate(ctx, inversion(corrupt, restore_data(), "data/corrupt-bytes"))
    assert good.status == "validated", good.detail
    for state in ("broken", "fixed"):  # the solver's view was checked in both shells
        assert "$ login (as root" in good.logs[f"solver-view-{state}"]
        assert "$ bash -c (as root" in good.logs[f"solver-view-{state}"]
    assert good.f2p and good.p2p and sorted(good.f2p + good.p2p) == ctx.state.passing
    assert all(good.broken.get(t) != "passed" for t in good.f2p)
    assert all(good.fixed.get(t) == "passed" for t in ctx.state.passing)


def test_a_break_with_a_random_effect_is_not_reproducible(ctx: Context) -> None:
    """Each application deselects a random half of the tests (through the environment file), so
    the replay on a fresh copy fails another set: with 18 tests, the same set 1 time in 2**18."""
    tests = [t for t in ctx.state.passing if not t.startswith("probe::")]
    assert len(tests) >= 10
    pick = "\n".join([
        f"ids=({' '.join(shlex.quote(t) for t in tests)})",
        "picked=()",
        'for id in "${ids[@]}"; do if (( RANDOM % 2 )); then picked+=("--deselect=$id"); fi; done',
        '(( ${#picked[@]} > 0 )) || picked=("--deselect=${ids[0]}")',
        'echo "export PYTEST_ADDOPTS=\'${picked[*]}\'" >> "$MINER_ENV_FILE"',
    ])
    candidate = validate(ctx, inversion(pick, "sed -i '/PYTEST_ADDOPTS/d' \"$MINER_ENV_FILE\"", "env/wrong-var"))
    rejected(candidate, "not-reproducible")
    assert "different F2P set" in candidate.detail


def test_a_symptom_the_solvers_login_shell_does_not_show_is_rejected(ctx: Context) -> None:
    """A variable set for non-interactive shells only (~/.bashrc skips the line in an interactive
    shell): the crawl's runs and `bash -c` fail, but the instruction's command typed into a login
    shell (as terminus-2 types it) passes, so the solver could not see the problem."""
    hidden = ("printf 'case $- in *i*) ;; *) export INVENTORY_CURRENCY=XXX ;; esac\\n' >> \"$MINER_ENV_FILE\"")
    heal = "sed -i '/INVENTORY_CURRENCY=XXX/d' \"$MINER_ENV_FILE\""
    candidate = validate(ctx, inversion(hidden, heal, "env/wrong-var"))
    rejected(candidate, "solver-view")
    assert "in the broken environment" in candidate.detail and "it passes in `login`" in candidate.detail
    assert "`bash -c`" not in candidate.detail  # Harbor's exec shows it
    assert "fix" not in candidate.logs and "$ login (as root" in candidate.logs["solver-view-broken"]


def test_a_second_break_with_the_same_family_and_f2p_is_a_duplicate_symptom(ctx: Context) -> None:
    """Two breaks of one data file that fail the same tests are one problem: the second is refused
    (before its fix runs), unless the crawl keeps more per symptom."""
    corrupt = f'printf "sku,name\\n\\xff\\xfe" > "$MINER_PROJECT/{DATA}"'
    first = validate(ctx, inversion(corrupt, restore_data(), "data/corrupt-bytes"))
    assert first.status == "validated", first.detail
    seen = {("data", frozenset(first.f2p)): 1}
    again = f'printf "sku,name\\n\\xfe\\xff" > "$MINER_PROJECT/{DATA}"'  # the same damage, other bytes
    second = validate(replace(ctx, symptoms=seen), inversion(again, restore_data(), "data/truncate"))
    rejected(second, "duplicate-symptom")
    assert "fix" not in second.logs  # decided before the fix ran
    other_family = validate(replace(ctx, symptoms=seen), inversion(again, restore_data(), "fs/deleted"))
    assert other_family.status == "validated", other_family.detail
    kept = validate(replace(ctx, symptoms=seen, per_symptom=2), inversion(again, restore_data(), "data/truncate"))
    assert kept.status == "validated", kept.detail
