"""Model-written task instructions, from what a user would see; the template instruction is the fallback.

The model is given only the symptom a person meeting the broken environment would have: the
failing command, the first lines of its output (already filtered by miner.instruction), the
ids of the failing checks and the test command. Never the break, the fix, the evidence or the
summary. Its text is then checked by the same leak markers as the template instruction (plus
the break's lines and the evidence note); an empty, overlong or leaky text falls back to the
template. The template's rules section is appended either way.

    writer = instruction_writer(client, record=lambda call: ...)
    task.instruction = writer(task, candidate, healthy)
"""

from __future__ import annotations

import json
from collections.abc import Callable

from miner.instruction import _leaky, observed_symptom, plain_test_command, write_instruction
from miner.llm import Call, LLMClient, LLMError
from miner.models import PROJECT_DIR, Candidate, HealthyState, Task

MAX_CHARS = 3000
MIN_MARKER = 12  # break-script lines shorter than this are too generic to count as a leak
RULES_HEADING = "Rules:"
PROMPT = (f"Write the body of instruction.md for a repair task, in markdown, under 150 words: what the user "
          f"observes and that the environment the project in {PROJECT_DIR} runs in must be repaired so the "
          "whole test suite passes again. Describe only the symptom below; do not guess or hint at the cause. "
          "Reply with the markdown only.")


def user_view(task: Task, candidate: Candidate, healthy: HealthyState) -> dict[str, object]:
    """What a user sees of the broken environment: the failing command, its output, the failing checks."""
    symptom = observed_symptom(task, candidate, healthy)
    return {"failing_command": symptom.command, "its_output_starts_with": symptom.message,
            "failing_checks": sorted(candidate.f2p)[:20], "failing_count": len(candidate.f2p),
            "test_command": plain_test_command(task.test_command or healthy.test_command)}


def leaks(text: str, task: Task) -> list[str]:
    """Markers of the answer found in a text: the template's markers, the break's lines, the evidence."""
    markers = list(_leaky(task))
    markers += [line.strip() for line in task.break_script.splitlines()
                if len(line.strip()) >= MIN_MARKER and not line.strip().startswith(("set -", "#"))]
    markers += [e.detail for e in task.evidence if e.detail]
    return [m for m in markers if m and m in text]


def model_instruction(client: LLMClient, task: Task, candidate: Candidate,
                      healthy: HealthyState) -> tuple[str, Call | None, str]:
    """(instruction, the model call or None, "model" or why the template was used)."""
    template = write_instruction(task, candidate, healthy)
    rules = template[template.index(RULES_HEADING):] if RULES_HEADING in template else ""
    view = json.dumps(user_view(task, candidate, healthy), indent=1)
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": view}]
    try:
        reply = client.chat(messages, max_tokens=400)
    except LLMError as exc:
        return template, exc.call, f"template: model call failed ({exc.outcome})"
    text = reply.content.strip().removeprefix("```markdown").removeprefix("```").removesuffix("```").strip()
    if reply.refused or not text:
        return template, reply.call, "template: empty or refused"
    if len(text) > MAX_CHARS:
        return template, reply.call, "template: too long"
    found = leaks(text, task)
    if found:
        return template, reply.call, f"template: the model's text leaks {found[0][:60]!r}"
    return f"{text}\n\n{rules}" if rules else text + "\n", reply.call, "model"


def instruction_writer(client: LLMClient, record: Callable[[Call], None]) -> Callable[
        [Task, Candidate, HealthyState], str]:
    """A function writing a task's instruction with the model (recording each call), template as fallback."""

    def write(task: Task, candidate: Candidate, healthy: HealthyState) -> str:
        text, call, _ = model_instruction(client, task, candidate, healthy)
        if call is not None:
            record(call)
        return text

    return write
