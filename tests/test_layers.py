"""openmrc's layers import one way and its modules import each other in no circle.

Layers, lowest first (a module may import its own layer and the ones below it):
``wire``, ``units``, ``version``, ``errors`` < ``transport`` < ``sim``, ``net``,
``baselines``, ``workloads``, ``topology``, ``topocalc`` < everything else (the run
pipeline, ``paper``, ``sweep``, the demos, the report) < the CLI modules (``cli``,
``*_cli``).  Every import counts, also one inside a function or under
``TYPE_CHECKING``: a lazy import is still a dependency.  Read from the sources
with :mod:`ast`, so the test sees the same thing compiled or not.

``KNOWN`` lists what is still to be untangled; the test fails on anything new, and on
an entry that is gone (take it off the list, so it stays gone).  The same rule holds
between packages (``PACKAGE_RANK``): a package never imports one above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PKG = "openmrc"

#: circles (sorted members joined by " <-> ") and upward imports ("a -> b") not yet removed.
KNOWN: frozenset[str] = frozenset()


def _modname(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _native(name: str) -> bool:
    """A compiled extension with no Python source (a .pyi stub or C file beside it)."""
    pkg, _, leaf = name.rpartition(".")
    folder = SRC.joinpath(*pkg.split("."))
    return any((folder / f"{leaf}{ext}").exists() for ext in (".pyi", ".c"))


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its source)."""
    mods = {_modname(p): p for p in (SRC / PKG).rglob("*.py")}

    def resolve(name: str) -> str | None:
        if _native(name):
            return None
        while name:
            if name in mods:
                return name
            name = name.rpartition(".")[0]
        return None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")
                    base = ".".join(up[: len(up) - node.level + 1] + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = subs + ([] if all(_native(t) for t in subs) else [base])
            for t in targets:
                r = resolve(t)
                if r and r != mod and r.startswith(PKG):
                    edges[mod].add(r)
    # `from pkg import sub` names the package too: keep only the submodule
    for out in edges.values():
        for t in list(out):
            if mods[t].name == "__init__.py" and any(o.startswith(t + ".") for o in out):
                out.discard(t)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer(mod: str) -> int:
    """The layer of a module (0 lowest, 4 the CLI), module by module."""
    parts = mod.split(".")[1:] or [""]
    head, leaf = parts[0], parts[-1]
    if head == "cli" or leaf == "cli" or leaf.endswith("_cli"):
        return 4
    if head in ("wire", "units", "version", "errors"):
        return 0
    if head == "transport":
        return 1
    if head in ("sim", "net", "baselines", "workloads", "topology", "topocalc", "flow"):
        return 2
    return 3


#: Packages (and the modules loose at the top), lowest first.  A package may import
#: itself and the packages of lower rank; of the same rank only the pairs in ``PEERS``.
PACKAGE_RANK: dict[str, int] = {
    "wire": 0, "units": 0, "version": 0,
    "transport": 1,
    "topology": 2, "topocalc": 2,
    "workloads": 3,
    "sim": 4, "baselines": 4, "net": 4, "loopback": 4,
    "flow": 5, "clustermapper": 5,
    "pipeline": 6,
    "sweep": 7,
    "paper": 8, "demo": 8,
    "cli": 9,
}  # fmt: skip

#: Same-rank packages that import each other: the packet simulator and the baselines
#: that run on its engine (each builds the other's fabric pieces).
PEERS: frozenset[frozenset[str]] = frozenset({frozenset({"sim", "baselines"})})


def package(mod: str) -> str:
    """The package (or loose top-level module) a module belongs to."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_findings(edges: dict[str, set[str]]) -> set[str]:
    """Every import from a package to one of higher rank, or to a same-rank package that
    is not its peer, and every package missing from ``PACKAGE_RANK``."""
    found: set[str] = set()
    for m, out in edges.items():
        a = package(m)
        if not a:
            continue
        if a not in PACKAGE_RANK:
            found.add(f"{m}: package {a!r} has no rank (add it to PACKAGE_RANK)")
            continue
        for t in out:
            b = package(t)
            if not b or b == a:
                continue
            if b not in PACKAGE_RANK:
                continue  # reported from its own modules
            ra, rb = PACKAGE_RANK[a], PACKAGE_RANK[b]
            if rb > ra or (rb == ra and frozenset({a, b}) not in PEERS):
                found.add(f"{m} -> {t} (package {a} rank {ra} -> {b} rank {rb})")
    return found


def test_no_package_imports_one_above_it() -> None:
    """The layer rule between packages: ``cli`` on top imports everything, nothing
    imports ``cli``; the pipeline imports the simulator, never the other way round."""
    found = package_findings(import_graph())
    assert not found, "imports up the package layers:\n" + "\n".join(sorted(found))


def test_package_check_sees_a_lazy_upward_import() -> None:
    """The package rule on a hand-made graph: a lazy import of the pipeline from the
    simulator (what a function-level import looks like to the walker), a peer import, a
    same-rank non-peer import and a clean downward one."""
    edges = {
        "openmrc.sim.experiment": {"openmrc.pipeline.run", "openmrc.baselines.fabric"},
        "openmrc.net.lab": {"openmrc.sim.config"},
        "openmrc.pipeline.run": {"openmrc.sim.experiment"},
        "openmrc.cli.run": {"openmrc.pipeline.run"},
    }
    assert package_findings(edges) == {
        "openmrc.sim.experiment -> openmrc.pipeline.run (package sim rank 4 -> pipeline rank 6)",
        "openmrc.net.lab -> openmrc.sim.config (package net rank 4 -> sim rank 4)",
    }


def findings(edges: dict[str, set[str]]) -> set[str]:
    """Every circle and every upward import, as strings comparable with ``KNOWN``."""
    found = {" <-> ".join(c) for c in circles(edges)}
    found |= {
        f"{m} -> {t}" for m, out in edges.items() for t in out if m != PKG and layer(t) > layer(m)
    }
    return found


def test_no_new_circle_or_upward_import() -> None:
    new = findings(import_graph()) - KNOWN
    assert not new, "new import circles or upward imports:\n" + "\n".join(sorted(new))


def test_known_list_only_shrinks() -> None:
    gone = KNOWN - findings(import_graph())
    assert not gone, "fixed, take off KNOWN:\n" + "\n".join(sorted(gone))


def test_the_check_sees_circles_and_upward_imports() -> None:
    """The walker itself: a circle, a lazy upward import and a clean edge."""
    edges = {
        "openmrc.wire.a": {"openmrc.wire.b"},
        "openmrc.wire.b": {"openmrc.wire.a"},
        "openmrc.transport.x": {"openmrc.sim.y"},
        "openmrc.sim.y": {"openmrc.transport.x"},
        "openmrc.sim.z": {"openmrc.wire.a"},
    }
    assert findings(edges) == {
        "openmrc.wire.a <-> openmrc.wire.b",
        "openmrc.sim.y <-> openmrc.transport.x",
        "openmrc.transport.x -> openmrc.sim.y",
    }
