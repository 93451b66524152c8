"""Task instructions: what the agent is told, written only from the observed symptom.

The instruction shows one command that fails in the broken environment (the test command with
one failing test id, or a failing derived probe's command) and the first lines of its error,
and asks for the environment to be repaired without editing the project's code or tests. It
never names the inversion type, its family, its target, or the fix: error lines that quote the
type, its summary or a line of the fix script are dropped.

The symptom is chosen by one function, `choose_symptom`, for the instruction (`observed_symptom`,
from a task) and for the validator's solver-view step (`candidate_symptom`, from a candidate
before any task exists), so what the crawl checks in a solver's shells is what the instruction
shows; `Symptom.view()` is that check's record (miner.models.SolverView, see miner.solver_view).

Three variants (models.INSTRUCTION_VARIANTS), all kept with the task:
  symptom   the failing command and the first lines of its error (the default)
  hard      the failing command only, no error text
  hinted    the symptom plus the area the cause lies in ("the installed Python packages", "a
            system library", ...: AREAS, by the type's category), never the target or the fix

    text = write_instruction(task, candidate, healthy)
    texts = write_instructions(task, candidate, healthy, categories=["dependencies"])
    assert not instruction_leaks(task, texts["hinted"])
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from miner import ecosystems
from miner.models import (
    INSTRUCTION_VARIANTS,
    PROJECT_DIR,
    Candidate,
    Evidence,
    HealthyState,
    Inversion,
    Outcome,
    Part,
    Probe,
    SolverView,
    Task,
)

# Where the cause lies, by the type's category (miner.catalogue.CATEGORIES): never the target nor the fix.
AREAS = {
    "python-environment": "the Python environment itself (the virtual environment, how its interpreter "
                          "starts, or what it loads at start-up)",
    "dependencies": "the installed Python packages",
    "compatibility": "how the environment's versions, builds or interpreter settings fit together",
    "network-security": "the network or TLS settings the project's connections depend on",
    "concurrency-state": "run-time state the program keeps (locks, process files, databases or caches)",
    "configuration": "a configuration the program reads (its own, its user's, or its environment variables)",
    "data-files": "a data file the program reads",
    "filesystem": "file permissions, links or files that went missing",
    "system-libraries": "a system library or the system's shared data",
    "interpreter-stdlib": "the interpreter or its standard library",
    "services": "a service the project runs",
}
DEFAULT_AREA = "the environment around the project"
MAX_LINES = 12
MAX_LINE_CHARS = 300
REPORT_OPTIONS = ("--junitxml", "--junit-xml", "--junit-prefix")


@dataclass
class Symptom:
    """One failing check as the agent would see it."""

    command: str  # what to run, in PROJECT_DIR
    check: str  # the failing test or probe id
    outcome: str
    message: list[str] = field(default_factory=list)
    failing: int = 1  # healthy-passing checks that fail now
    probe: Probe | None = None  # the probe, when the check is one

    @property
    def printed_line(self) -> str:
        """The first error line shown that the command itself prints verbatim ("" when none is).

        pytest prints a failure's message (not a skip's reason, by default); a probe's message
        starts with miner's own summary ("exit 1 (healthy: 0)") and, for an import or a console
        script, goes on with the program's output, unless the program could not even start (then it
        is Python's wording of the error, not the shell's); a container's command and service
        checks are summaries and logs."""
        if self.probe is None:
            return self.message[0] if self.message and self.outcome != "skipped" else ""
        kind = ecosystems.probe_kind(self.probe.kind)
        return kind.printed(self.message) if kind else ""

    def view(self) -> SolverView:
        """What a solver's shells must show of this symptom (checked by miner.solver_view)."""
        return SolverView(command=self.command, check=self.check, outcome=self.outcome, line=self.printed_line,
                          probe=self.probe)


def plain_test_command(command: str) -> str:
    """The test command without report-writing options (the agent does not need them)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in REPORT_OPTIONS:
            skip = True
            continue
        if word.startswith(tuple(f"{opt}=" for opt in REPORT_OPTIONS)):
            continue
        kept.append(word)
    return shlex.join(kept)


def check_command(test_command: str, check: str) -> str:
    """The command that runs one test of the suite (pytest's node id, node's name pattern, ...)."""
    plain = plain_test_command(test_command)
    return ecosystems.runner_for(plain).check_command(plain, check)


def probe_command(probe: Probe) -> str:
    """The shell command a derived probe runs (for a service: start it, then ask it)."""
    if (kind := ecosystems.probe_kind(probe.kind)) and (command := kind.command(probe)):
        return command
    if probe.kind == "http" and probe.url:
        fetch = "python3 -c " + shlex.quote(
            f"import urllib.request; print(urllib.request.urlopen({json.dumps(probe.url)}, timeout=10).read().decode())")
        return f"{shlex.join(probe.argv)} &\nsleep 3\n{fetch}" if probe.argv else fetch
    return healthcheck_command(probe.argv) or shlex.join(probe.argv)


def healthcheck_command(test: list[str]) -> str | None:
    """A Docker HEALTHCHECK test (["CMD-SHELL", cmd] or ["CMD", argv...]) as a shell command."""
    if len(test) >= 2 and test[0] == "CMD-SHELL":
        return test[1]
    if len(test) >= 2 and test[0] == "CMD":
        return shlex.join(test[1:])
    return None


def image_checks(task: Task, probes: dict[str, Probe]) -> str:
    """A sentence on what the verifier checks of a Dockerized project's own image, or ""."""
    checked = {p.id: p for p in probes.values() if p.id in set(task.f2p + task.p2p)}
    parts = []
    if "probe::cmd" in checked:
        parts.append(f"its command (`{shlex.join(checked['probe::cmd'].argv)}`) must print what it printed "
                     "and exit as it did")
    for probe in (p for key, p in sorted(checked.items()) if key.startswith("probe::http::") and p.url):
        who = f"`{shlex.join(probe.argv)}`" if probe.argv else "its service"
        parts.append(f"{who}, started there, must answer `GET {probe.url}` as it did")
    if "probe::healthcheck" in checked:
        parts.append(f"its health check (`{probe_command(checked['probe::healthcheck'])}`) must pass as it did")
    if not parts:
        return ""
    return (f"The container's own behaviour is checked as well, run in `{PROJECT_DIR}`: "
            + "; ".join(parts) + ".")


ERROR_LINE = re.compile(r"\b\w*(Error|Exception|Exit|Denied)\b")


def _choose(f2p: list[str], messages: dict[str, str], probes: dict[str, Probe]) -> str:
    """The failing check to show: a real test before a probe, then one whose message names an
    error within its first lines, then the shortest message (the most direct symptom)."""

    def rank(check: str) -> tuple[bool, bool, bool, int, str]:
        message = messages.get(check, "")
        head = [line for line in message.splitlines() if line.strip()][:MAX_LINES]
        return (check in probes or check.startswith("probe::"), not message,
                not any(ERROR_LINE.search(line) for line in head), len(message), check)

    return min(sorted(f2p), key=rank)


def leak_markers(type_id: str, summary: str, fix_script: str, evidence: Sequence[Evidence] = (),
                 parts: Sequence[Part] = ()) -> list[str]:
    """Strings whose presence in an error line would hand out the answer: the type, the summary, a
    line of the fix, an evidence note (and a compound's parts' types, summaries and evidence)."""
    fix_lines = [line.strip() for line in fix_script.splitlines()]
    markers = [type_id, summary, *(p.type_id for p in parts), *(p.summary for p in parts)]
    markers += [line for line in fix_lines if len(line) >= 20 and not line.startswith("set -")]
    markers += [e.detail for e in [*evidence, *(e for p in parts for e in p.evidence)] if len(e.detail) >= 20]
    return [m for m in dict.fromkeys(markers) if m]


def _leaky(task: Task) -> list[str]:
    return leak_markers(task.type_id, task.summary, task.fix_script, task.evidence, task.parts)


def instruction_leaks(task: Task, text: str) -> list[str]:
    """The markers of the answer an instruction text contains: the type, the summary, a line of the
    fix, an evidence note ([] when it hands out nothing). Error lines of the symptom are filtered
    by them already; the leak check holds every variant to the same list."""
    return [m for m in _leaky(task) if m in text]


def message_lines(message: str, leaks: list[str]) -> list[str]:
    """The first non-empty lines of an error, shortened, without lines that quote the answer."""
    lines = []
    for line in message.splitlines():
        if not line.strip() or any(marker in line for marker in leaks):
            continue
        lines.append(line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " ...")
        if len(lines) == MAX_LINES:
            break
    return lines


def choose_symptom(f2p: list[str], broken: dict[str, Outcome], messages: dict[str, str], *, test_command: str,
                   probes: dict[str, Probe], leaks: list[str]) -> Symptom:
    """The failing command and its error, from a broken run: its F2P ids, their outcomes and messages."""
    if not f2p:
        raise ValueError("no failing check to describe")
    check = _choose(f2p, messages, probes)
    command = probe_command(probes[check]) if check in probes else check_command(test_command, check)
    return Symptom(
        command=command,
        check=check,
        outcome=broken.get(check, "failed"),
        message=message_lines(messages.get(check, ""), leaks),
        failing=len(f2p),
        probe=probes.get(check),
    )


def observed_symptom(task: Task, candidate: Candidate, healthy: HealthyState) -> Symptom:
    """The failing command and its error, from the candidate's broken run (what the instruction shows)."""
    if not candidate.f2p:
        raise ValueError(f"candidate {candidate.id} has no failing check to describe")
    return choose_symptom(candidate.f2p, candidate.broken, candidate.broken_messages,
                          test_command=task.test_command or healthy.test_command,
                          probes={p.id: p for p in [*healthy.probes, *task.probes]}, leaks=_leaky(task))


def candidate_symptom(inversion: Inversion, f2p: list[str], broken: dict[str, Outcome], messages: dict[str, str],
                      healthy: HealthyState) -> Symptom:
    """The symptom the instruction of this candidate will show, while it is being validated (the
    task it would become has the healthy state's test command and probes, the inversion's fix)."""
    return choose_symptom(f2p, broken, messages, test_command=healthy.test_command,
                          probes={p.id: p for p in healthy.probes},
                          leaks=leak_markers(inversion.type_id, inversion.summary, inversion.fix_script,
                                            inversion.evidence))


def _outcome_words(outcome: str) -> str:
    return {
        "skipped": "is now skipped instead of passing",
        "missing": "no longer runs at all (it is missing from the test report)",
        "error": "now ends with an error",
    }.get(outcome, "now fails")


def area_sentence(categories: list[str]) -> str:
    """Where the cause (or, for several faults, each cause) lies, as one sentence."""
    areas = list(dict.fromkeys(AREAS.get(c, DEFAULT_AREA) for c in categories)) or [DEFAULT_AREA]
    if len(categories) > 1:
        return (f"Hint: {len(categories)} separate things are broken; look at "
                + "; and at ".join(areas) + ".")
    return f"Hint: the cause lies in {areas[0]}."


def _language(test_command: str) -> str:
    return ecosystems.runner_for(test_command).language + " "


def _runtime(test_command: str) -> str:
    return ecosystems.runner_for(test_command).runtime


def render_instruction(symptom: Symptom, test_command: str, also_checked: str = "", variant: str = "symptom",
                       hint: str = "", suite: bool = True) -> str:
    """The markdown instruction for one symptom; `also_checked` names the image checks (image_checks).

    variant "hard" leaves the error text out; "hinted" adds `hint` (area_sentence) after it. A
    project without a test suite (`suite` False: a Dockerized service judged by its probes alone)
    is asked for its checks, with no test command, runtime or language named.
    """
    others = symptom.failing - 1
    also = f"; {others} other check{'s' if others != 1 else ''} that used to pass fail{'' if others != 1 else 's'} too"
    what = "its test suite passed" if suite else "its checks passed"
    parts = [
        "# Make the test suite pass again" if suite else "# Make the project's checks pass again",
        "",
        f"The {_language(test_command) if suite else ''}project in `{PROJECT_DIR}` used to work: {what}. Something "
        f"around the project has changed since, and the check below {_outcome_words(symptom.outcome)}"
        f"{also if others > 0 else ''}. Run in `{PROJECT_DIR}`:",
        "",
        "```bash",
        symptom.command,
        "```",
        "",
    ]
    if symptom.message and variant != "hard":
        parts += ["Its output starts with:", "", "```text", *symptom.message, "```", ""]
    if hint and variant == "hinted":
        parts += [hint, ""]
    if suite:
        parts += ["Find the cause and repair the environment the project runs in, so that the whole suite "
                  f"(`{test_command}`, run in `{PROJECT_DIR}`) passes again. {_runtime(test_command)}", ""]
    else:
        parts += ["Find the cause and repair the environment the project runs in, so that this check and "
                  "the ones below pass again.", ""]
    parts += [
        *([also_checked, ""] if also_checked else []),
        "Rules:",
        "",
        "- Do not modify the project's source code or its tests: they are checked and must stay "
        "byte-for-byte as they are.",
        "- Do not skip, deselect or delete tests, and do not change how they are run." if suite else
        "- Do not change how the project is started or checked.",
        "- Restore what the project expects instead of working around it.",
        "",
    ]
    return "\n".join(parts)


def write_instruction(task: Task, candidate: Candidate, healthy: HealthyState) -> str:
    """The instruction.md text of a validated task, from its candidate's broken run."""
    return write_instructions(task, candidate, healthy)["symptom"]


def write_instructions(task: Task, candidate: Candidate, healthy: HealthyState,
                       categories: list[str] | None = None) -> dict[str, str]:
    """Every variant of a validated task's instruction (INSTRUCTION_VARIANTS); `categories` are its
    type's (a compound's: its parts'), for the hinted variant's area."""
    symptom = observed_symptom(task, candidate, healthy)
    probes = {p.id: p for p in [*healthy.probes, *task.probes]}
    command = plain_test_command(task.test_command or healthy.test_command)
    hint = area_sentence(categories if categories is not None else [task.category])
    suite = any(not t.startswith("probe::") for t in healthy.outcomes)
    return {variant: render_instruction(symptom, command, image_checks(task, probes), variant, hint, suite)
            for variant in INSTRUCTION_VARIANTS}
