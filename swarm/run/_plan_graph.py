"""Graph algorithms behind the plan contract, on subtask indices.

Owns scope-overlap detection (`overlap_masks`), graph validation with named cycles
(`graph_problems`), topological order, longest-chain lengths and the serialisation of
overlapping subtasks (`serialise_overlaps`). Dependencies are index lists: `deps[i]`
holds the indices subtask `i` depends on; sets of subtasks are bitsets (Python ints).
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Iterator, Sequence, Set
from fnmatch import fnmatchcase

__all__ = [
    "chain_lengths",
    "graph_problems",
    "overlap_masks",
    "serialise_overlaps",
    "topo_order",
]

_GLOB_CHARS = "*?["


def overlap_masks(scopes: Sequence[Sequence[str]]) -> list[int]:
    """For each subtask, a bitset of the other subtasks whose scope overlaps its own."""
    exact: dict[str, int] = {}  # literal path -> subtasks naming it
    under: dict[str, int] = {}  # directory -> subtasks naming something below it
    literals: list[tuple[int, str, bool]] = []  # (subtask, path, may be a directory)
    globs: list[tuple[int, str]] = []
    for j, scope in enumerate(scopes):
        for entry in scope:
            if any(c in entry for c in _GLOB_CHARS):
                globs.append((j, entry))
                continue
            path = entry.rstrip("/")
            maybe_dir = entry.endswith("/") or "." not in posixpath.basename(path)
            literals.append((j, path, maybe_dir))
            exact[path] = exact.get(path, 0) | (1 << j)
            for parent in _parents(path):
                under[parent] = under.get(parent, 0) | (1 << j)
    masks = [0] * len(scopes)
    for j, path, _ in literals:
        masks[j] |= exact[path] | under.get(path, 0)
        for parent in _parents(path):
            masks[j] |= exact.get(parent, 0)
    for n, (j, pattern) in enumerate(globs):
        prefix, suffix = _literal_ends(pattern)
        for k, path, maybe_dir in literals:
            if fnmatchcase(path, pattern) or (maybe_dir and _compatible(path + "/", prefix)):
                masks[j] |= 1 << k
                masks[k] |= 1 << j
        for k, other in globs[n + 1 :]:
            other_prefix, other_suffix = _literal_ends(other)
            if _compatible(prefix, other_prefix) and _compatible_end(suffix, other_suffix):
                masks[j] |= 1 << k
                masks[k] |= 1 << j
    return [mask & ~(1 << j) for j, mask in enumerate(masks)]


def _parents(path: str) -> Iterator[str]:
    """`a/b/c` -> `a/b`, `a`."""
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        yield path


def _literal_ends(pattern: str) -> tuple[str, str]:
    """The text before a glob's first wildcard and after its last one."""
    first = min(pattern.index(c) for c in _GLOB_CHARS if c in pattern)
    last = max((pattern.rindex(c) for c in "*?]" if c in pattern), default=first)
    return pattern[:first], pattern[last + 1 :]


def _compatible(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def _compatible_end(a: str, b: str) -> bool:
    return a.endswith(b) or b.endswith(a)


# --- graph algorithms on index lists: deps[i] holds the indices subtask i depends on ---


def graph_problems(
    ids: Sequence[str],
    deps: Sequence[Sequence[str]],
    labels: Sequence[str],
    *,
    skip_empty: bool = False,
) -> list[str]:
    """Duplicate ids, unknown and self dependencies, and one named cycle per knot."""
    problems: list[str] = []
    index: dict[str, int] = {}
    for i, x in enumerate(ids):
        if not x:
            if not skip_empty:
                problems.append(f"{labels[i]} has an empty id")
        elif x in index:
            problems.append(f"duplicate id {x!r}: {labels[index[x]]} and {labels[i]}")
        else:
            index[x] = i
    adj: list[list[int]] = [[] for _ in ids]
    for i, ds in enumerate(deps):
        for d in ds:
            if d == ids[i]:
                problems.append(f"{labels[i]} depends on itself")
            elif d in index:
                adj[i].append(index[d])
            else:
                close = difflib.get_close_matches(d, list(index), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(f"{labels[i]} depends on unknown id {d!r}{hint}")
    for comp in _knots(adj):
        cycle = _cycle_through(min(comp), adj, set(comp))
        names = " -> ".join(ids[v] for v in [*cycle, cycle[0]])
        problems.append(f"dependency cycle: {names} (each depends on the next)")
    return problems


def _knots(adj: Sequence[Sequence[int]]) -> list[list[int]]:
    """Strongly connected components with more than one node (iterative Tarjan)."""
    n = len(adj)
    order, low = [-1] * n, [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if order[root] != -1:
            continue
        work = [(root, 0)]
        while work:
            v, start = work.pop()
            if start == 0:
                order[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            for k in range(start, len(adj[v])):
                w = adj[v][k]
                if order[w] == -1:
                    work += [(v, k + 1), (w, 0)]
                    break
                if on_stack[w]:
                    low[v] = min(low[v], order[w])
            else:
                if low[v] == order[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
                if work:  # back in the parent: fold the child's low-link in
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
    return out


def _cycle_through(start: int, adj: Sequence[Sequence[int]], within: Set[int]) -> list[int]:
    """A shortest cycle from `start` back to itself inside one strongly connected component."""
    parent = {start: start}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in adj[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                if w in within and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component always has a cycle")


def topo_order(deps: Sequence[Sequence[int]]) -> list[int]:
    """Indices with every subtask after all of its dependencies (the graph is acyclic)."""
    waiting = [len(ds) for ds in deps]
    dependents: list[list[int]] = [[] for _ in deps]
    for v, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(v)
    order = [v for v, n in enumerate(waiting) if n == 0]
    for v in order:  # grows while iterating: Kahn's algorithm
        for u in dependents[v]:
            waiting[u] -= 1
            if waiting[u] == 0:
                order.append(u)
    return order


def chain_lengths(deps: Sequence[Sequence[int]]) -> list[int]:
    """For each subtask, the node count of the longest path to one nothing depends on."""
    length = [1] * len(deps)
    for v in reversed(topo_order(deps)):
        for d in deps[v]:
            length[d] = max(length[d], length[v] + 1)
    return length


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def serialise_overlaps(
    deps: Sequence[Sequence[int]], overlaps: Sequence[int]
) -> list[tuple[int, int]]:
    """Add (later, earlier) edges so no two overlapping subtasks are ever independent.

    Ancestor and descendant sets are bitsets (Python ints), updated as edges are added; an
    edge is added only when neither subtask already reaches the other, so no cycle can form.
    Nearest earlier overlaps are linked first, so a file shared by many becomes one chain.
    """
    order = topo_order(deps)
    anc = [0] * len(deps)
    desc = [0] * len(deps)
    for v in order:
        for d in deps[v]:
            anc[v] |= anc[d] | (1 << d)
    for v in reversed(order):
        for d in deps[v]:
            desc[d] |= desc[v] | (1 << v)
    added: list[tuple[int, int]] = []
    for later, mask in enumerate(overlaps):
        free = mask & ((1 << later) - 1) & ~(anc[later] | desc[later])
        while free:
            earlier = free.bit_length() - 1
            above = anc[earlier] | (1 << earlier)
            below = desc[later] | (1 << later)
            for v in _bits(below):
                anc[v] |= above
            # desc[] is only read for subtasks not yet processed, so skip the rest
            for v in _bits(above >> (later + 1)):
                desc[v + later + 1] |= below
            added.append((later, earlier))
            free &= ~anc[later]
    return added
