"""Prediction and selection over the graph: which tests a target's break should fail, how deep
below them it sits, and which of the enumerated targets are worth trying first.

The graph does not decide what may be broken: the targets come from
miner.inverters.targets.enumerate_targets (the one enumeration, the crawl's and `miner graph`'s);
this module only ranks them and predicts their radius.

    chosen = select_targets(graph, healthy, targets, budget=20, seed=0)  # [(target, F2P, depth)]
    predict(graph, target)        # ids of the tests and probes that depend on it
    depth(graph, target, f2p)     # 1 = a failing test uses the broken node directly
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable

import networkx as nx

from miner import ecosystems
from miner.models import HealthyState, Target

# Target kinds the graph has no nodes for: tried after the selected ones, with no prediction.
UNMODELLED_KINDS = frozenset({"system", "service", "setting", "state", "compound"})


def target_nodes(graph: nx.DiGraph, target: Target) -> list[str]:
    """Graph nodes a target stands for.

    Files match by path whichever of config/data the caller called them; an ecosystem's own
    kinds (Python's distributions and modules) are its adapter's to map.
    """
    if target.kind in ("config", "data"):
        paths = {p for p in (target.path, target.name) if p}
        return [n for n, a in graph.nodes(data=True) if a["kind"] in ("config", "data") and a.get("path") in paths]
    found = ecosystems.target_nodes(graph, target)
    if found is not None:
        return found
    return [target.key] if target.key in graph else []


def predict(graph: nx.DiGraph, target: Target) -> set[str]:
    """Ids of the tests and probes whose result depends, transitively, on the target.

    A test that sets an environment variable itself (monkeypatch.setenv, os.environ[...] = ...)
    does not depend on its outside value, unless some module reads it at import time.
    """
    found: set[str] = set()
    for node in target_nodes(graph, target):
        overridable = target.kind == "envvar" and not any(
            graph.nodes[p]["kind"] == "module" for p in graph.predecessors(node))
        for dependent in nx.ancestors(graph, node) | {node}:
            attrs = graph.nodes[dependent]
            if attrs.get("test_id") is None:
                continue
            if overridable and target.name in attrs.get("sets_env", ()):
                continue
            found.add(attrs["test_id"])
    return found


def depth(graph: nx.DiGraph, target: Target, tests: Iterable[str]) -> int | None:
    """Shortest distance from the given tests down to the target (1 = used directly by a test).

    A test's own file and its conftest files count as the test itself. None when no given test
    reaches the target.
    """
    nodes = target_nodes(graph, target)
    wanted = {f"test:{t}" if not t.startswith("probe::") else f"probe:{t}" for t in tests}
    if not nodes or not wanted:
        return None
    lengths = nx.multi_source_dijkstra_path_length(graph.reverse(copy=False), set(nodes), weight="weight")
    reached = [lengths[n] for n in wanted if n in lengths]
    return max(1, int(min(reached))) if reached else None


def select_targets(graph: nx.DiGraph, healthy: HealthyState, targets: list[Target], budget: int | None,
                   seed: int) -> list[tuple[Target, set[str], int]]:
    """Inversion points worth trying, best first: (target, predicted F2P, depth).

    Dropped: targets whose predicted radius (passing tests and probes that depend on them) is
    empty, and whole-suite targets inside the test runner (pytest, its plugins and their
    requirements). Other targets predicted to fail every passing test (probes aside) come after all the others:
    the prediction over-approximates (an import guarded by try/except, a function never called),
    so they may still break only part of the suite. Within each group: round-robin over target
    kinds (kind order shuffled by seed) so kinds are spread; within a kind, first a radius not
    chosen before (distinct F2P sets first), then a node not chosen before, then the deepest
    (indirect dependencies), then a seeded random tie-break.
    """
    passing = set(healthy.passing)
    scored = []
    for target in targets:
        radius = predict(graph, target) & passing
        if radius:
            scored.append((target, radius, depth(graph, target, radius) or 1))
    # Killing every test is "the whole suite" even when derived probes survive.
    suite = {t for t in passing if not t.startswith("probe::")} or passing
    partial = [s for s in scored if not s[1] >= suite]
    runner = _runner_closure(graph)  # breaking the test runner itself only ever stops every test
    whole = [s for s in scored if s[1] >= suite and not set(target_nodes(graph, s[0])) & runner]
    rng = random.Random(seed)
    chosen = _spread(partial, rng) + _spread(whole, rng)
    return chosen if budget is None else chosen[:budget]


def _runner_closure(graph: nx.DiGraph) -> set[str]:
    """pytest, its plugins, and every distribution they require."""
    runners = {v for _, v, rel in graph.edges(data="rel") if rel in ("runner", "plugin") and v in graph}
    return runners.union(*(nx.descendants(graph, r) for r in runners)) if runners else set()


def _spread(pool: list[tuple[Target, set[str], int]], rng: random.Random) -> list[tuple[Target, set[str], int]]:
    """The pool in selection order: kinds round-robin, new radii and nodes first, deepest first."""
    ties = {id(s): rng.random() for s in pool}
    buckets: dict[str, list] = defaultdict(list)
    for item in pool:
        buckets[item[0].kind].append(item)
    kinds = sorted(buckets)
    rng.shuffle(kinds)
    chosen: list[tuple[Target, set[str], int]] = []
    radii: dict[frozenset, int] = defaultdict(int)
    keys: dict[str, int] = defaultdict(int)
    while len(chosen) < len(pool):
        for kind in kinds:
            if not buckets[kind]:
                continue
            best = min(buckets[kind], key=lambda s: (radii[frozenset(s[1])], keys[s[0].key], -s[2], ties[id(s)]))
            buckets[kind].remove(best)
            radii[frozenset(best[1])] += 1
            keys[best[0].key] += 1
            chosen.append(best)
    return chosen
