"""The solver's view: the instruction's command run the way a solver's shells run it.

A solver meets a task through a harness: Harbor's exec runs `bash -c CMD`, its reference agent
(terminus-2) types into `bash --login` in tmux. Each starts from the environment the container
(or sandbox) gives a new process, not from a shell that already read the project's environment.
The check: in both shells the instruction's command (miner.models.SolverView, made by
miner.instruction) fails before the fix, printing the instruction's first error line when the
command prints it verbatim, and passes after the fix.

One script runs both shells (`view_script`); its one output holds a marker line per shell
(`read_view`), so the validator spends one Sandbox.run per state and `miner check` one exec
per container. The shells start from the environment the script's own bash started with
(/proc/$$/environ: what the harness's exec gave it, before bash read $BASH_ENV), in a process group
of their own that is killed afterwards (a service the command started in the background goes too).
The command runs once when both shells would run it alike: `bash -c` first prints what the
command's behaviour can depend on (exported variables, umask, limits, shell options but the
interactive shell's own, what each word of the command names: alias, function, builtin or file),
with bash's builtins alone, and when that matches what the login shell printed just before it ran
the command, the login shell's run stands for both (`ShellRun.reused`).

    script = view_script(view.command, timeout=300)
    runs = read_view(sandbox.run(script).output)
    problems = judge(view, runs, fixed=False)      # [] when every shell shows the symptom
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
from dataclasses import dataclass

from miner import ecosystems
from miner.models import PROJECT_DIR, SolverView

# The solver's shells: a login shell as terminus-2 opens it (interactive, so it reads /etc/profile
# and ~/.profile but not $BASH_ENV) and Harbor's `bash -c`.
SHELLS = {"login": "bash --login -i -c", "bash -c": "bash -c"}
MARKER = "@@miner-solver-view"
KEEP_BYTES = 100_000  # of each stream of each shell
SHOWN_CHARS = 300  # of each shell's output in a problem's text
# What an interactive shell without a terminal says about itself, not about the command.
SHELL_NOISE = re.compile(r"^bash: (cannot set terminal process group|no job control in this shell).*$\n?",
                         re.MULTILINE)
# What differs between two runs of one command: object addresses, pytest's numbered temporary folders.
# What differs between two runs of one interpreter or two builds of it: addresses, pytest's temporary
# folders, the C source line an extension reports (OpenSSL's "(_ssl.c:1006)" is "(_ssl.c:992)" in
# Debian's build of the same Python).
# (A runner adds its own: Runner.volatile.)
VOLATILE = ((re.compile(r"0x[0-9a-fA-F]+"), "0x?"), (re.compile(r"\b(\w+\.c):\d+"), r"\1:?"))

# The shell's state a command can depend on, printed with builtins alone (a break may empty PATH):
# options only an interactive shell sets differently (history, line editing, job control,
# completion, alias expansion: aliases are compared by name below) are left out.
FINGERPRINT = r"""(
while IFS= read -r line; do
  case $line in
    {interactive}) ;;
    *) printf '%s\n' "$line";;
  esac
done < <(set -o; shopt -p)
declare -px; umask; ulimit -a
for w in {words}; do printf '%s=%s\n' "$w" "$(type -t -- "$w")"; done
) >{file} 2>&1"""
INTERACTIVE_OPTIONS = ("emacs", "vi", "histexpand", "history", "monitor")  # `set -o NAME`
INTERACTIVE_SHOPTS = ("login_shell", "expand_aliases", "checkwinsize", "histappend", "cmdhist", "lithist",
                      "histreedit", "histverify", "checkjobs", "progcomp", "progcomp_alias", "promptvars",
                      "hostcomplete", "no_empty_cmd_completion", "direxpand", "dirspell", "complete_fullquote",
                      "force_fignore", "interactive_comments")  # `shopt -s NAME`
COMMAND_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*$")

SCRIPT = r"""
base=()
mapfile -d '' -t base < /proc/$$/environ
limit=()
if command -v timeout >/dev/null 2>&1; then limit=(timeout -k 5 {timeout}); fi
cmd=$(printf '%s' {command_b64} | base64 -d)
out=$(mktemp) err=$(mktemp) first=$(mktemp) again=$(mktemp)
fingerprint=$(printf '%s' {fingerprint_b64} | base64 -d)
user=$(id -un 2>/dev/null || id -u)
reused=0
for shell in {shells}; do
  case $shell in login) argv=({login}) fp=$first;; *) argv=({plain}) fp=$again;; esac
  cd /
  if [ "$shell" != login ] && [ {reusable} = 1 ]; then
    "${{limit[@]}}" env -i "${{base[@]}}" "${{argv[@]}}" "cd {project} || exit 99
${{fingerprint//@FILE@/$fp}}" </dev/null >/dev/null 2>&1
    if [ -s "$first" ] && [ "$(<"$first")" == "$(<"$again")" ]; then reused=1; fi
  fi
  if [ $reused = 0 ]; then
    "${{limit[@]}}" env -i "${{base[@]}}" "${{argv[@]}}" "cd {project} || exit 99
${{fingerprint//@FILE@/$fp}}
$cmd" >"$out" 2>"$err" </dev/null &
    pid=$!
    wait "$pid"
    rc=$?
    kill -KILL -- -"$pid" 2>/dev/null
  fi
  printf '{marker} %s %s %s %s %s %s\n' "$user" "$(printf %s "$shell" | base64 -w0)" "$rc" \
    "$(tail -c {keep} "$out" | base64 -w0)" "$(tail -c {keep} "$err" | base64 -w0)" "$reused"
done
rm -f "$out" "$err" "$first" "$again"
"""


@dataclass
class ShellRun:
    """What one shell printed running the instruction's command."""

    user: str
    shell: str
    exit_code: int
    stdout: str
    stderr: str
    reused: bool = False  # the login shell's run, standing for this shell's: both would run it alike

    @property
    def output(self) -> str:
        """Both streams, without the interactive shell's complaints about having no terminal."""
        return self.stdout + SHELL_NOISE.sub("", self.stderr)

    def tail(self) -> str:
        text = " ".join(self.output.split())
        return text if len(text) <= SHOWN_CHARS else "..." + text[-SHOWN_CHARS:]


def view_script(command: str, timeout: float = 600.0, cwd: str = PROJECT_DIR) -> str:
    """A bash script running `command` in `cwd` in each solver shell, as the user running the
    script; prints one marker line per shell (see read_view)."""
    return SCRIPT.format(
        timeout=max(1, int(timeout)), command_b64=_quoted_b64(command),
        fingerprint_b64=_quoted_b64(_fingerprint(command)), reusable=int("!" not in command),
        shells=" ".join(shlex.quote(s) for s in SHELLS), login=SHELLS["login"],
        plain=SHELLS["bash -c"], project=shlex.quote(cwd), marker=MARKER, keep=KEEP_BYTES,
    )


def _quoted_b64(text: str) -> str:
    return shlex.quote(base64.b64encode(text.encode()).decode())


def _fingerprint(command: str) -> str:
    """The shell code printing the state `command` may depend on into @FILE@ (see FINGERPRINT)."""
    words = sorted({w for w in command.replace(";", " ").replace("|", " ").split() if COMMAND_WORD.match(w)})
    interactive = "|".join([f"{name}[[:space:]]*" for name in INTERACTIVE_OPTIONS]
                           + [f'"shopt -"[su]" {name}"' for name in INTERACTIVE_SHOPTS])
    return FINGERPRINT.format(interactive=interactive, file='"@FILE@"',
                              words=" ".join(shlex.quote(w) for w in words) or "''")


def _b64(text: str) -> str:
    return base64.b64decode(text).decode("utf-8", "replace") if text else ""


def read_view(output: str) -> list[ShellRun]:
    """The runs a view_script printed, in order ([] when it printed none: it could not run)."""
    runs = []
    for line in output.splitlines():
        words = line.split(" ")
        if len(words) == 7 and words[0] == MARKER and words[3].lstrip("-").isdigit():
            runs.append(ShellRun(user=words[1], shell=_b64(words[2]), exit_code=int(words[3]),
                                 stdout=_b64(words[4]), stderr=_b64(words[5]), reused=words[6:] == ["1"]))
    return runs


def _normal(text: str, volatile: tuple[tuple[re.Pattern[str], str], ...] = ()) -> str:
    for pattern, replacement in (*VOLATILE, *volatile):
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def shows_line(run: ShellRun, view: SolverView) -> bool:
    """Whether the run printed the view's line, in one of the forms the test's runner prints a
    reported line (Runner.printed_forms; a probe's line as it is); the instruction may have shortened
    it with " ..."."""
    needle = view.line.strip().removesuffix(" ...")
    runner = ecosystems.runner_for(view.command) if view.probe is None else None
    forms = runner.printed_forms(needle) if runner else [needle]
    volatile = runner.volatile if runner else ()
    output = _normal(run.output, volatile)
    return not needle or any(_normal(form, volatile)[:200] in output for form in forms)


def passes(view: SolverView, run: ShellRun) -> bool:
    """Whether the check passes in this run: pytest ran it and it passed (not skipped); a probe
    exits as it did healthy and, where its output was recorded, prints what it printed healthy (an
    import or a console script: stdout; an image's command: both streams as one); a service's
    answer is fetched."""
    probe = view.probe
    if probe is None:
        return ecosystems.runner_for(view.command).run_passed(run.exit_code, run.output, view.outcome)
    if probe.kind == "http":  # the fetch of the service's answer
        return run.exit_code == 0
    expected = probe.expected_exit if probe.expected_exit is not None else 0
    if run.exit_code != expected:
        return False
    if not probe.expected_digest:
        return True
    if (kind := ecosystems.probe_kind(probe.kind)) and kind.stdout_only:  # probe.py digests stdout alone
        return _digest(run.stdout) == probe.expected_digest
    # an image's command: the backend digests both streams as one (`docker exec`)
    stderr = SHELL_NOISE.sub("", run.stderr)
    return probe.expected_digest in (_digest(run.stdout + stderr), _digest(stderr + run.stdout))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def judge(view: SolverView, runs: list[ShellRun], fixed: bool) -> list[str]:
    """What is wrong with the runs ([] when none): before the fix (fixed=False) the check fails in
    every shell, showing the instruction's first error line; after it, it passes in every shell."""
    if not runs:
        return ["the solver's shells did not run (no report from the view script)"]
    problems = []
    for run in runs:
        who = f"{run.shell}" + ("" if run.user == "root" else f" as {run.user}")
        if fixed and not passes(view, run):
            problems.append(f"after the fix it still fails in `{who}` (exit {run.exit_code}): {run.tail()}")
        elif not fixed and passes(view, run):
            problems.append(f"it passes in `{who}` (exit {run.exit_code}): {run.tail()}")
        elif not fixed and not shows_line(run, view):
            problems.append(f"`{who}` does not print {view.line!r} (exit {run.exit_code}): {run.tail()}")
    return problems


def log_text(runs: list[ShellRun]) -> str:
    """The runs as a log: each shell's exit code and output."""
    parts = []
    for run in runs:
        if run.reused:
            parts.append(f"$ {run.shell} (as {run.user}): the login shell's state, so its run (exit {run.exit_code})")
        else:
            parts.append(f"$ {run.shell} (as {run.user}, exit {run.exit_code})\n{run.output.rstrip()}")
    return "\n\n".join(parts) + "\n"
