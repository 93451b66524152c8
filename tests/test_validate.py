"""The validator's acceptance rules, each shown with a hand-written inversion on a real fixture.

The inversions run against inventory-app as the session crawl built and measured it (its
healthy sandbox and recorded healthy state are reused, nothing is mocked): a break that fails,
one that edits protected code, one that edits the tests' data, one that breaks nothing, one that
kills the whole suite, one that leaves a backup of what it corrupted, a fix that does nothing, a
break whose effect is random, and the rule-8 refusals (no evidence, a fix that carries a large
literal or decodes a payload, a fix that needs the network its evidence does not give it). A
correct break with a fix that recovers from its evidence is validated, as the control; and the
procedural inverter's candidates are validated with each evidence kind a folder can have.
"""

from __future__ import annotations

import base64
from dataclasses import replace
import shlex
from pathlib import Path

import pytest
from conftest import FIXTURES

from miner.catalogue import load_catalogue
from miner.evidence import MAX_FIX_LITERAL
from miner.ecosystems import build_spec
from miner.inverters.procedural import ProceduralInverter
from miner.inverters.targets import enumerate_targets
from miner.models import Candidate, Evidence, Inversion, Project, Target
from miner.sandbox.local import LocalBackend
from miner.sources import fetch, parse_source
from miner.store import Store
from miner.validate import Context, healthy_manifest, validate

DATA = "inventory/data/products.csv"
KILL_PTH = '"$MINER_SITE_PACKAGES/zz-miner-test-kill.pth"'
REVERSIBLE = [Evidence(kind="reversible", detail="written by hand: the break shows the way back")]
# A reversible break of the data file and the fix its evidence gives: the file re-encoded as UTF-16
# (the code reads UTF-8), and iconv back.
REENCODE = f'F="$MINER_PROJECT/{DATA}"\nT="$(mktemp)"\niconv -f UTF-8 -t UTF-16 "$F" > "$T"\ncat "$T" > "$F"'
DECODE = f'F="$MINER_PROJECT/{DATA}"\nT="$(mktemp)"\niconv -f UTF-16 -t UTF-8 "$F" > "$T"\ncat "$T" > "$F"'
UNREADABLE, READABLE = f'chmod 000 "$MINER_PROJECT/{DATA}"', f'chmod 644 "$MINER_PROJECT/{DATA}"'


@pytest.fixture(scope="module")
def project(mined_store: Path) -> Project:
    store = Store(mined_store, create=False)
    return fetch(parse_source(str(FIXTURES / "inventory-app"), FIXTURES), store.cache_root / "sources")


@pytest.fixture(scope="module")
def ctx(mined_store: Path, project: Project) -> Context:
    """inventory-app's healthy sandbox and state, as the session crawl left them."""
    store = Store(mined_store, create=False)
    state = store.healthy(project.key)
    assert state is not None and len(state.passing) > 2
    backend = LocalBackend()
    env = backend.build(project, build_spec(project), store.work_root / project.key)  # reused, not rebuilt
    return Context(backend, env, state, healthy_manifest(backend, env), timeout=300)


def inversion(break_script: str, fix_script: str = "true", type_id: str = "data/truncate",
              evidence: list[Evidence] | None = None) -> Inversion:
    family = type_id.split("/")[0]
    return Inversion(type_id=type_id, family=family, target=Target(kind="data", name=DATA, path=DATA),
                     break_script=f"set -euo pipefail\n{break_script}\n",
                     fix_script=f"set -euo pipefail\n{fix_script}\n",
                     summary="written by hand for a validator test",
                     evidence=REVERSIBLE if evidence is None else evidence)


def restore_data() -> str:
    """A fix that embeds the original data file: a copy of the answer, which rule 8 refuses."""
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


def test_a_break_that_edits_the_tests_data_is_rejected_under_rule_7(ctx: Context) -> None:
    """The tests are the judge: their data changed is its own rule, not protected-changed."""
    expected = "tests/data/expected_value_report.txt"
    candidate = validate(ctx, inversion(f'printf "x\\n" >> "$MINER_PROJECT/{expected}"'))
    rejected(candidate, "test-tree-changed")
    assert expected in candidate.detail and "inventory/" not in candidate.detail


@pytest.mark.parametrize("added", [
    "$MINER_PROJECT/tests/data/conftest.py",  # a conftest in the test tree, below the healthy one
    "$MINER_PROJECT/tests/__init__.py",  # a package marker: the test modules' names change
    "$MINER_PROJECT/tests/pytest.ini",  # configuration found in the tests' folder first
    "$MINER_PROJECT/tox.ini",  # configuration in a folder above the test modules
    "/sandbox/conftest.py",  # above the project
])
def test_a_break_that_adds_a_file_pytest_reads_is_rejected_under_rule_7(ctx: Context, added: str) -> None:
    """Rule 7 for files the healthy state did not have: each of these changes how pytest collects
    or runs the tests, the judge, even though no healthy file changed."""
    write = f'printf "import pytest\\n" > "{added}"\n{REENCODE}'
    candidate = validate(ctx, inversion(write, DECODE, "data/wrong-encoding"))
    rejected(candidate, "test-tree-changed")
    assert "added" in candidate.detail and added.replace("$MINER_PROJECT", "/sandbox/project") in candidate.detail


def test_a_file_added_outside_the_tests_reach_is_not_rule_7(ctx: Context) -> None:
    """The control: an __init__.py added beside the data, in no folder of a test module, is not."""
    write = f'printf "\\n" > "$MINER_PROJECT/inventory/data/__init__.py"\n{REENCODE}'
    candidate = validate(ctx, inversion(write, f'{DECODE}\nrm -f "$MINER_PROJECT/inventory/data/__init__.py"',
                                        "data/wrong-encoding"))
    assert candidate.rule != "test-tree-changed", candidate.detail


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
    corrupt = f'cp "$MINER_PROJECT/{DATA}" /sandbox/home/backup.csv\n{REENCODE}'
    candidate = validate(ctx, inversion(corrupt, DECODE, "data/wrong-encoding"))
    rejected(candidate, "answer-leaked")
    assert "/sandbox/home/backup.csv" in candidate.detail and DATA in candidate.detail


def test_a_fix_that_does_nothing_is_rejected_and_a_real_fix_is_validated(ctx: Context) -> None:
    failed = validate(ctx, inversion(REENCODE, "true", "data/wrong-encoding"))
    rejected(failed, "fix-failed")
    assert "still fail after the fix" in failed.detail
    good = validate(ctx, inversion(REENCODE, DECODE, "data/wrong-encoding"))
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


def test_a_break_that_makes_the_tests_hang_is_cut_after_a_few_suite_times(ctx: Context, monkeypatch) -> None:
    import miner.validate as validate_module

    monkeypatch.setattr(validate_module, "MIN_RUN_TIMEOUT", 5.0)
    limit = max(5.0, validate_module.HANG_FACTOR * ctx.state.suite_seconds)
    assert 0 < ctx.state.suite_seconds and limit < ctx.timeout
    # the data file becomes a named pipe nobody writes: whoever opens it waits forever
    candidate = validate(ctx, inversion(f'F="$MINER_PROJECT/{DATA}"\nrm -f "$F"\nmkfifo "$F"', "true"))
    rejected(candidate, "hangs")
    assert f"cut after {limit:.0f}s" in candidate.detail
    assert candidate.seconds < ctx.timeout


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
    first = validate(ctx, inversion(REENCODE, DECODE, "data/wrong-encoding"))
    assert first.status == "validated", first.detail
    seen = {("data", frozenset(first.f2p)): 1}
    # the same damage another way: the file unreadable, so its reader fails as it did
    second = validate(replace(ctx, symptoms=seen), inversion(UNREADABLE, READABLE, "data/truncate"))
    rejected(second, "duplicate-symptom")
    assert "fix" not in second.logs  # decided before the fix ran
    other_family = validate(replace(ctx, symptoms=seen), inversion(UNREADABLE, READABLE, "fs/unreadable"))
    assert other_family.status == "validated", other_family.detail
    kept = validate(replace(ctx, symptoms=seen, per_symptom=2), inversion(UNREADABLE, READABLE, "data/truncate"))
    assert kept.status == "validated", kept.detail


# -- rule 8: recoverable ----------------------------------------------------------------------------


def test_an_inversion_without_evidence_is_unrecoverable_before_anything_runs(ctx: Context) -> None:
    candidate = validate(ctx, inversion(REENCODE, DECODE, "data/wrong-encoding", evidence=[]))
    rejected(candidate, "unrecoverable")
    assert candidate.detail.startswith("no evidence") and candidate.logs == {} and candidate.suite_runs == 0
    unrun = inversion("", "", evidence=[]).model_copy(update={"no_evidence": "a folder has no published source"})
    assert validate(ctx, unrun).detail == "no evidence: a folder has no published source"


def test_a_fix_that_carries_a_copy_of_the_answer_is_unrecoverable(ctx: Context) -> None:
    """The embedded original is refused as a decoded payload; the same file as plain text in a
    heredoc, as more than a short literal (with the byte count); neither ever runs."""
    payload = validate(ctx, inversion(REENCODE, restore_data(), "data/wrong-encoding"))
    rejected(payload, "unrecoverable")
    assert "decodes a payload" in payload.detail and "base64 -d" in payload.detail and payload.logs == {}
    text = (FIXTURES / "inventory-app" / DATA).read_text()
    text += text.split("\n", 1)[1]  # its rows twice: more than a short literal
    assert len(text) > MAX_FIX_LITERAL
    heredoc = validate(ctx, inversion(REENCODE, f"cat > \"$MINER_PROJECT/{DATA}\" <<'CSV'\n{text}CSV",
                                      "data/wrong-encoding"))
    rejected(heredoc, "unrecoverable")
    assert f"carries {len(text)} bytes of literal data (at most {MAX_FIX_LITERAL})" in heredoc.detail


def test_a_fix_gets_the_network_only_when_its_evidence_needs_it(ctx: Context) -> None:
    """The same fix, which fetches from the package index: refused the network as reversible,
    given it as package-index."""
    fetch_then_fix = f'"$MINER_PYTHON" -m pip download -q --no-deps six==1.17.0 -d "$(mktemp -d)"\n{READABLE}'
    offline = validate(ctx, inversion(UNREADABLE, fetch_then_fix, "fs/unreadable"))
    rejected(offline, "fix-failed")
    assert "fix script exited" in offline.detail
    index = [Evidence(kind="package-index", detail="six==1.17.0")]
    online = validate(ctx, inversion(UNREADABLE, fetch_then_fix, "fs/unreadable", evidence=index))
    assert online.status == "validated", online.detail


@pytest.mark.parametrize("type_id, target_key, kind", [
    ("config/missing-key", "config:config.yaml", "project-files"),
    ("config/wrong-type", "config:settings.ini", "reversible"),
    ("deps/corrupt-module", "module:yaml", "package-index"),
])
def test_catalogue_candidates_are_validated_with_their_evidence(ctx: Context, project: Project, type_id: str,
                                                                target_key: str, kind: str) -> None:
    """The procedural inverter's own candidates on inventory-app: the README states config.yaml's
    values, settings.ini's retyped value shows the old one, the index holds PyYAML."""
    itype = load_catalogue()[type_id]
    target = {t.key: t for t in enumerate_targets(project, ctx.state)}[target_key]
    inv = ProceduralInverter([itype]).apply(project, ctx.state, target, itype)
    assert inv is not None and [e.kind for e in inv.evidence] == [kind], inv.no_evidence if inv else None
    candidate = validate(ctx, inv)
    assert candidate.status == "validated", (candidate.rule, candidate.detail)


def test_a_folder_has_no_published_source_so_a_deleted_file_is_unrecoverable(ctx: Context, project: Project) -> None:
    itype = load_catalogue()["fs/deleted"]
    target = {t.key: t for t in enumerate_targets(project, ctx.state)}[f"data:{DATA}"]
    candidate = validate(ctx, ProceduralInverter([itype]).apply(project, ctx.state, target, itype))
    rejected(candidate, "unrecoverable")
    assert "local source has no published source" in candidate.detail and candidate.logs == {}
