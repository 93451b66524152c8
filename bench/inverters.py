"""Benchmark: the procedural inverter, the model agent, and both, on the same projects and seed (issue 13).

Usage: OPENAI_BASE_URL=http://HOST:PORT/v1 python bench/inverters.py --model NAME
           [--repos repos.txt] [--budget 10] [--seed 0] [--agent-goals 3] [--agent-rounds 3]
           [--agent-steps 12] [--goal-tokens 60000] [--token-budget N] [--learn-budget 5] [--json]

Crawls the repos file three times into fresh stores (procedural, agent, both), one run each, and
prints per mode: candidates tried, validated, yield, the agent's yield by round, tokens (spent:
cache hits cost none) in total and per validated task, distinct F2P sets, and the agent tasks
whose break no catalogue type covers (measured as: the procedural crawl of the same projects and
seed made no task with the same project and F2P set). Then every validated agent task is
generalised with `inversions learn` and the learned type mined procedurally on the other
projects: its procedural yield, beside the agent's. The model and server are printed with the
figures. Each mode has its own store and so its own model cache.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from miner.inverters.agent import AgentOptions, AgentSettings
from miner.learn import LearnError, learn
from miner.llm import LLMClient, LLMSettings, TokenBudget
from miner.pipeline import CrawlOptions, crawl
from miner.store import Store

MODES = ("procedural", "agent", "both")


def client_for(args: argparse.Namespace, store: Store) -> LLMClient:
    settings = LLMSettings(model=args.model, timeout=args.llm_timeout, seed=args.seed, json_mode=args.json_mode)
    return LLMClient(settings, cache_dir=store.cache_root / "llm", budget=TokenBudget(args.token_budget))


def run_mode(mode: str, args: argparse.Namespace, root: Path) -> dict:
    store = Store(root / mode)
    agent = None
    if mode != "procedural":
        limits = AgentSettings(goals=args.agent_goals, rounds=args.agent_rounds, steps=args.agent_steps,
                               goal_tokens=args.goal_tokens)
        agent = AgentOptions(client_for(args, store), limits)
    options = CrawlOptions(budget=args.budget, seed=args.seed, inverter=mode, agent=agent)
    report = crawl(args.repos, store, options)
    stats, llm = store.stats(), store.llm_stats()
    tasks = store.list_tasks()
    store.close()
    return {
        "tried": stats["tried"], "validated": stats["validated"], "yield": round(stats["yield"], 3),
        "agent_tried": sum(b["tried"] for b in llm["by_round"].values()),
        "agent_validated": llm["agent_validated"],
        "by_round": {r: [b["tried"], b["validated"]] for r, b in sorted(llm["by_round"].items())},
        "tokens": llm["tokens"], "calls": llm["calls"], "cached_calls": llm["cached_calls"],
        "call_outcomes": llm["by_outcome"], "model_seconds": llm["seconds"],
        "tokens_per_validated": round(llm["tokens"] / stats["validated"]) if stats["validated"] else None,
        "tokens_per_agent_task": round(llm["tokens_per_validated"]) if llm["tokens_per_validated"] else None,
        "distinct_f2p_sets": len({(t.repo, frozenset(t.f2p)) for t in tasks}),
        "f2p_sets": sorted({f"{t.repo}|{'|'.join(sorted(t.f2p))}" for t in tasks if t.model}),
        "agent_tasks": [t.id for t in tasks if t.model],
        "by_rule": stats["by_rule"], "wall_s": round(report.seconds, 1),
        "skipped": [f"{p.repo}: {p.reason}" for p in report.projects if p.status != "mined"],
    }


def uncovered(results: dict) -> None:
    """Agent tasks whose (project, F2P set) the procedural crawl did not produce."""
    procedural = Store(results["_root"] / "procedural", create=False)
    known = {f"{t.repo}|{'|'.join(sorted(t.f2p))}" for t in procedural.list_tasks()}
    procedural.close()
    for mode in ("agent", "both"):
        results[mode]["uncovered"] = len([s for s in results[mode]["f2p_sets"] if s not in known])


def learned_yield(args: argparse.Namespace, results: dict) -> list[dict]:
    """Each validated agent task of the agent run, learned into a type and mined on the other projects."""
    rows = []
    store = Store(results["_root"] / "agent", create=False)
    out = results["_root"] / "learned"
    for task_id in results["agent"]["agent_tasks"]:
        client = client_for(args, store)
        try:
            report = learn(store, task_id, client, out, budget=args.learn_budget, seed=args.seed)
        except LearnError as exc:
            rows.append({"task": task_id, "type": "", "reproduced": False, "reason": str(exc)})
            continue
        rows.append({"task": task_id, "type": report.type_id, "reproduced": report.reproduced,
                     "tokens": report.tokens, "tried": sum(p.tried for p in report.others),
                     "validated": sum(p.validated for p in report.others),
                     "reason": "" if report.reproduced else report.attempts[-1][:120]})
    store.close()
    return rows


def print_table(results: dict, args: argparse.Namespace) -> None:
    server = os.environ.get("OPENAI_BASE_URL", "(the openai SDK's default)")
    print(f"model `{args.model}` at {server}; repos {args.repos}; seed {args.seed}; procedural budget "
          f"{args.budget} per project; agent: {args.agent_goals} goals x {args.agent_rounds} rounds x "
          f"{args.agent_steps} steps, {args.goal_tokens} tokens per goal\n")
    rows = [("candidates tried", "tried"), ("validated", "validated"), ("yield", "yield"),
            ("agent submissions", "agent_tried"), ("agent tasks", "agent_validated"),
            ("agent yield by round (tried/validated)", "by_round"), ("model calls (cached)", "calls"),
            ("tokens spent", "tokens"), ("tokens per validated task", "tokens_per_validated"),
            ("tokens per agent task", "tokens_per_agent_task"), ("distinct F2P sets", "distinct_f2p_sets"),
            ("agent tasks no catalogue type covers", "uncovered"), ("model seconds", "model_seconds"),
            ("wall (s)", "wall_s")]
    print("| figure | " + " | ".join(MODES) + " |\n|---|---|---|---|")
    for label, key in rows:
        cells = []
        for mode in MODES:
            value = results[mode].get(key, "-")
            if key == "yield":
                value = f"{value:.0%}"
            elif key == "calls":
                value = f"{value} ({results[mode]['cached_calls']})"
            elif key == "by_round":
                value = ", ".join(f"r{r}: {t}/{v}" for r, (t, v) in value.items()) or "-"
            cells.append("-" if value is None else str(value))
        print(f"| {label} | " + " | ".join(cells) + " |")
    for mode in MODES:
        print(f"\n{mode}: rejections by rule {json.dumps(results[mode]['by_rule'])}; model call outcomes "
              f"{json.dumps(results[mode]['call_outcomes'])}" + (f"; skipped {results[mode]['skipped']}"
                                                                  if results[mode]["skipped"] else ""))
    print("\n| learned from | type | reproduces its task | learn tokens | mined elsewhere tried / validated |")
    print("|---|---|---|---|---|")
    for row in results["learned"] or [{"task": "(no agent task to learn from)", "type": "-", "reproduced": "-"}]:
        print(f"| {row['task']} | {row['type'] or row.get('reason', '')} | {row['reproduced']} | "
              f"{row.get('tokens', '-')} | {row.get('tried', '-')} / {row.get('validated', '-')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, default=Path("repos.txt"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--budget", type=int, default=10, help="procedural candidates per project")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agent-goals", type=int, default=3)
    parser.add_argument("--agent-rounds", type=int, default=3)
    parser.add_argument("--agent-steps", type=int, default=12)
    parser.add_argument("--goal-tokens", type=int, default=60_000)
    parser.add_argument("--token-budget", type=int, default=None)
    parser.add_argument("--llm-timeout", type=float, default=600.0)
    parser.add_argument("--json-mode", default="off", choices=["off", "schema", "object"])
    parser.add_argument("--learn-budget", type=int, default=5, help="candidates of a learned type per other project")
    parser.add_argument("--keep", type=Path, default=None, help="keep the stores under this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miner-inverters-") as tmp:
        root = args.keep or Path(tmp)
        results: dict = {"_root": root}
        for mode in MODES:
            results[mode] = run_mode(mode, args, root)
        uncovered(results)
        results["learned"] = learned_yield(args, results)
    results.pop("_root")
    print(json.dumps(results, indent=1, default=str)) if args.json else print_table(results, args)


if __name__ == "__main__":
    main()
