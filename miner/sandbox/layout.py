"""Where a sandbox's environment lives: the shell startup files every backend and every export share.

The environment the project runs in (its venv first on PATH, VIRTUAL_ENV, the project's own
variables) is kept where a real system keeps it, the shell's rc file under HOME, so every shell
a harness opens reads it, and so do miner's own commands and the verifier:

    $HOME/.bashrc    the environment ($MINER_ENV_FILE, models.ENV_FILE): `export NAME='value'` lines
    $HOME/.profile   login shells (`bash --login`, terminus-2's tmux pane): sources ~/.bashrc, as
                     Debian's does, after /etc/profile has reset PATH
    BASH_ENV         points at ~/.bashrc: non-interactive `bash -c` (Harbor's exec, Sandbox.run,
                     break and fix scripts) reads it too
    SYSTEM_HOOKS     in images only (the local backend binds the host's /etc read-only): a login
                     or interactive shell whose HOME is another one (another user, a harness that
                     resets HOME) still reads the same file, through /etc/profile.d/ and /etc/bash.bashrc

HOME is /sandbox/home (models.HOME_DIR) in every backend: the local backend can write only under
/sandbox. The files are POSIX sh (a dash login shell reads /etc/profile.d too) and idempotent
(a login shell may read ~/.bashrc twice). Only the project's variables are `export NAME=...`
lines (the env family's scripts edit those; the venv's lines are written otherwise).

    files = home_files({"APP_MODE": "production"})     # {".bashrc": ..., ".profile": ...}
    env = shell_env()                                  # {"HOME": ..., "BASH_ENV": ...}
"""

from __future__ import annotations

import shlex

from miner.models import ENV_FILE, HOME_DIR, VENV_DIR

RC_NAME = ".bashrc"
PROFILE_NAME = ".profile"
PROFILE_HOOK = "/etc/profile.d/sandbox-env.sh"
BASHRC_HOOK = "/etc/bash.bashrc"  # appended to: Debian's returns early for non-interactive shells
# Every backend's PATH: the venv, then the PATH Debian's /etc/profile gives root's login shells
# (and Docker's default), so a login shell and `bash -c` of a sandbox find commands alike.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_PATH = f"{VENV_DIR}/bin:{SYSTEM_PATH}"

RC_HEAD = f"""# ~/.bashrc: the environment the project in /sandbox/project runs in. Every bash reads this
# file: login shells through ~/.profile, interactive ones directly, `bash -c` through $BASH_ENV.
# The virtual environment first on PATH (a login shell's /etc/profile has reset PATH):
VIRTUAL_ENV={VENV_DIR}
export VIRTUAL_ENV
case ":$PATH:" in
    *":{VENV_DIR}/bin:"*) ;;
    *) export PATH="{VENV_DIR}/bin:$PATH" ;;
esac
"""

PROFILE = """# ~/.profile: executed by the command interpreter for login shells.
# if running bash, include .bashrc if it exists
if [ -n "$BASH_VERSION" ]; then
    if [ -f "$HOME/.bashrc" ]; then
        . "$HOME/.bashrc"
    fi
fi
"""

HOOK = f"""# The sandbox's environment for shells whose HOME is not {HOME_DIR} (see {ENV_FILE}).
if [ "${{HOME:-}}" != {HOME_DIR} ] && [ -r {ENV_FILE} ]; then
    . {ENV_FILE}
fi
"""


def render_env_file(env: dict[str, str]) -> str:
    """The rc file's text: the venv on PATH, then one shell-quoted export per project variable, sorted."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    return RC_HEAD + ("# the project's variables\n" + "\n".join(lines) + "\n" if lines else "")


def home_files(env: dict[str, str]) -> dict[str, str]:
    """The startup files under HOME, by name: ~/.bashrc (the environment) and ~/.profile."""
    return {RC_NAME: render_env_file(env), PROFILE_NAME: PROFILE}


def shell_env() -> dict[str, str]:
    """The variables a sandbox's processes start with so that every bash reads the environment."""
    return {"HOME": HOME_DIR, "BASH_ENV": ENV_FILE}


def system_hooks_script(hook_file: str) -> str:
    """Shell lines installing the hook (a file holding HOOK) for every user's login and
    interactive shells: /etc/profile.d/ and the end of /etc/bash.bashrc."""
    quoted = shlex.quote(hook_file)
    return (f"mkdir -p /etc/profile.d && install -m 0644 {quoted} {PROFILE_HOOK}\n"
            f"cat {quoted} >> {BASHRC_HOOK}\n")
