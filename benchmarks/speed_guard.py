"""The speed guard behind ``sim_speed.py --vs-ref REF``: another commit against the
working tree, both compiled, paired on the same case.

What it measures is what a user runs: each side is a compiled build made the way a
user makes one (``pip install -e .`` in a fresh venv, which builds the mypyc modules
and the C event kernel), and each side runs its own ``benchmarks/sim_speed.py --child
CASE`` (so a case means what it meant at that commit; the events and packet-link
traversals printed beside the ratio show whether both did the same work).

* The reference: ``git archive REF`` unpacked under the cache (``OPENMRC_REF_CACHE``,
  default ``~/.cache/openmrc-ref``) in ``<sha>-py<X.Y>/``, with its venv; built once
  and reused.  An export rather than a ``git worktree``: nothing is registered in the
  repository, and deleting the cache is all the cleaning there is.
* The working tree: the files git would commit (tracked and untracked, less ignored,
  as they are on disk now) copied to ``work-<content hash>-py<X.Y>/`` and built the
  same way, so uncommitted edits are measured compiled; an unchanged tree reuses its
  build.  ``--work-python PY`` measures the openmrc that interpreter imports instead
  (an install you made yourself; it must be compiled).

Each side first builds the case once and runs it 1 us, untimed (the first process
after a build or a pause builds slower: fresh memory).  Then runs alternate in pairs,
the order swapped each pair (work, ref; ref, work; work, ref ...; ``--pairs``, default
3), each a fresh niced process, so that neither side always runs first.  CPU seconds
are the child's own (``os.wait4`` rusage: user + system), so a loaded machine costs
wall time but little CPU.  The ratio printed is the working
tree's CPU over the reference's, summed over the pairs, with each pair's ratio and
their median (one slow run moves the sum, not the median).
Builds that came out pure Python (no C compiler, a mypyc failure) are refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Environment variable naming the cache of reference and working-tree builds.
CACHE_ENV = "OPENMRC_REF_CACHE"
#: Marker written into a build directory once its venv passed the compiled check.
BUILT_MARKER = "built.json"
#: The probe run in a side's interpreter: where openmrc comes from and what is compiled.
_PROBE = (
    "import json, openmrc, openmrc.transport.requester as r, openmrc.sim._native as n; "
    "print(json.dumps({'file': openmrc.__file__, 'requester': r.__file__, "
    "'native_kernel': bool(n.NATIVE)}))"
)


class GuardError(Exception):
    """A problem the guard reports in one line (bad argument, failed build or run)."""


def cache_root() -> Path:
    """Where reference and working-tree builds are kept."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "openmrc-ref"


def python_tag(version: Sequence[int] | None = None) -> str:
    """``py3.11``: builds are per interpreter version (compiled modules are)."""
    v = tuple(version) if version is not None else sys.version_info[:2]
    return f"py{v[0]}.{v[1]}"


def ref_key(sha: str, tag: str) -> str:
    """The cache directory name of a reference build: the full commit id and the
    interpreter tag (a branch name would move; a short id could become ambiguous)."""
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise GuardError(f"--vs-ref: {sha!r} is not a full commit id")
    return f"{sha}-{tag}"


def content_key(files: dict[str, bytes], tag: str) -> str:
    """The cache directory name of a working-tree build: a hash of every file's path
    and bytes (order-independent), so any edit makes a new build and none reuses one."""
    h = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        h.update(path.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return f"work-{h.hexdigest()[:20]}-{tag}"


def check_pairs(pairs: int) -> int:
    """``--pairs``: at least 1 (3 or more for a ratio worth quoting)."""
    if pairs < 1:
        raise GuardError(f"--pairs: must be at least 1 (got {pairs})")
    return pairs


def check_nice(level: int) -> int:
    """``--nice``: a niceness increment 0..19."""
    if not 0 <= level <= 19:
        raise GuardError(f"--nice: must be 0..19 (got {level})")
    return level


@dataclass
class Pairing:
    """CPU seconds of paired runs: ``work[i]`` and ``ref[i]`` ran one after the other."""

    work: list[float] = field(default_factory=list)
    ref: list[float] = field(default_factory=list)

    def add(self, work_cpu: float, ref_cpu: float) -> None:
        """One pair (both positive)."""
        if work_cpu <= 0 or ref_cpu <= 0:
            raise GuardError(f"a run reported no CPU time ({work_cpu}, {ref_cpu})")
        self.work.append(work_cpu)
        self.ref.append(ref_cpu)

    def pair_ratios(self) -> list[float]:
        """Each pair's work / ref CPU."""
        return [w / r for w, r in zip(self.work, self.ref, strict=True)]

    def ratio(self) -> float:
        """Work / ref over all pairs (sums, so a long run weighs as much as its CPU)."""
        if not self.work:
            raise GuardError("no pairs measured")
        return sum(self.work) / sum(self.ref)

    def summary(self) -> dict[str, object]:
        """The figures printed and written: ratio, per-pair ratios and their median, the
        sides' median CPU."""
        ratios = self.pair_ratios()
        return {
            "pairs": len(ratios),
            "cpu_ratio": round(self.ratio(), 3),
            "pair_ratios": [round(r, 3) for r in ratios],
            "pair_ratio_median": round(statistics.median(ratios), 3),
            "work_cpu_median": round(statistics.median(self.work), 2),
            "ref_cpu_median": round(statistics.median(self.ref), 2),
        }


# ----- builds ------------------------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; its stdout (a GuardError with git's message on failure)."""
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise GuardError(f"git {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out.stdout


def resolve_ref(repo: Path, ref: str) -> str:
    """The full commit id ``ref`` names in ``repo``."""
    if not ref or ref.startswith("-"):
        raise GuardError(f"--vs-ref: {ref!r} is not a commit name")
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise GuardError(f"--vs-ref: {ref!r} is not a commit in {repo}")
    return out.stdout.strip()


def work_files(repo: Path) -> dict[str, bytes]:
    """The working tree as git would commit it now: tracked and untracked files (less
    ignored ones), their bytes as on disk; deleted tracked files left out."""
    names = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    files = {}
    for name in filter(None, names.split("\0")):
        path = repo / name
        if path.is_file() and not path.is_symlink():
            files[name] = path.read_bytes()
    return files


def _probe(python: Path | str) -> dict[str, object]:
    """What openmrc ``python`` imports (run outside any PYTHONPATH)."""
    out = subprocess.run(
        [str(python), "-c", _PROBE], capture_output=True, text=True, env=child_env()
    )
    if out.returncode != 0:
        raise GuardError(f"{python}: cannot import openmrc: {out.stderr.strip()[-300:]}")
    got: dict[str, object] = json.loads(out.stdout)
    return got


def build_causes(log: Path) -> str:
    """What the build said about leaving parts uncompiled: setup.py's ``openmrc:`` lines
    and the compiler's errors from ``log``, as a suffix for an error message ("" when
    the log names none)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = [
        line.strip() for line in lines
        if line.lstrip().startswith("openmrc:") or ": error:" in line or "Killed" in line
    ]  # fmt: skip
    if not said:
        return f" (see {log})"
    return "; the build said: " + " | ".join(said[-5:]) + f" (see {log})"


def require_compiled(python: Path | str, what: str) -> dict[str, object]:
    """The probe of ``python``, refusing a pure-Python install (it would measure the
    interpreter, not the build a user runs)."""
    got = _probe(python)
    if not str(got["requester"]).endswith((".so", ".pyd")) or not got["native_kernel"]:
        raise GuardError(
            f"{what}: openmrc at {got['file']} is not compiled (requester {got['requester']}, "
            f"native kernel {got['native_kernel']}); install it with a C compiler and mypy"
        )
    return got


def build(tree: Path, nice: int, log: Path) -> Path:
    """``pip install -e tree`` into ``tree/../venv`` (niced; output to ``log``); the
    venv's python."""
    venv = tree.parent / "venv"
    python = venv / "bin" / "python"
    with open(log, "ab") as out:
        for argv in (
            [sys.executable, "-m", "venv", str(venv)],
            # -v: setup.py's own lines ("openmrc: mypyc failed (...)") reach the log;
            # with -q pip hides them and a pure-Python build has no stated cause
            [str(python), "-m", "pip", "install", "-v", "-e", str(tree)],
            # the scenario loader imports the flow level, which needs numpy: the
            # scenario-file cases (ring-loss1-*) of a commit that did not declare it
            [str(python), "-m", "pip", "install", "-q", "numpy"],
        ):
            proc = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=child_env(),
                preexec_fn=lambda: os.nice(nice),
            )  # fmt: skip
            if proc.returncode != 0:
                raise GuardError(f"build of {tree} failed ({' '.join(argv[:3])}...): see {log}")
    return python


def ensure_ref(repo: Path, sha: str, nice: int) -> tuple[Path, Path]:
    """The python and ``sim_speed.py`` of the cached compiled build of commit ``sha``
    (built if missing)."""
    home = cache_root() / ref_key(sha, python_tag())

    def export(tree: Path) -> None:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", sha],
            capture_output=True,
        )
        if archive.returncode != 0:
            raise GuardError(f"git archive {sha}: {archive.stderr.decode().strip()}")
        import io

        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")

    return _ensure(home, export, nice, f"--vs-ref {sha[:10]}")


def ensure_work(repo: Path, nice: int) -> tuple[Path, Path]:
    """The python and ``sim_speed.py`` of the cached compiled build of the working
    tree's current content (built if missing)."""
    files = work_files(repo)
    home = cache_root() / content_key(files, python_tag())

    def export(tree: Path) -> None:
        for name, data in files.items():
            dest = tree / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)

    return _ensure(home, export, nice, "the working tree")


def _ensure(home: Path, export: object, nice: int, what: str) -> tuple[Path, Path]:
    """Reuse ``home``'s build when its marker is there; else export and build afresh.

    Held under an exclusive lock on ``home``'s lock file, so two guards wanting the same
    build at once build it once (the second waits, then reuses it) instead of each
    deleting the other's half-made tree."""
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.with_name(home.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locked(home, export, nice, what)


def _ensure_locked(home: Path, export: object, nice: int, what: str) -> tuple[Path, Path]:
    """:func:`_ensure`'s work, with the lock held."""
    python = home / "venv" / "bin" / "python"
    script = home / "src" / "benchmarks" / "sim_speed.py"
    if (home / BUILT_MARKER).is_file() and python.exists():
        return python, script
    if home.exists():
        shutil.rmtree(home)  # a build that stopped half-way
    tree = home / "src"
    tree.mkdir(parents=True)
    assert callable(export)
    export(tree)
    print(f"building {what} in {home} (pip install -e, niced; log {home / 'build.log'})",
          file=sys.stderr, flush=True)  # fmt: skip
    t0 = time.perf_counter()
    python = build(tree, nice, home / "build.log")
    try:
        probe = require_compiled(python, what)
    except GuardError as exc:
        raise GuardError(f"{exc}{build_causes(home / 'build.log')}") from None
    probe["build_seconds"] = round(time.perf_counter() - t0, 1)
    (home / BUILT_MARKER).write_text(json.dumps(probe) + "\n")
    return python, script


# ----- runs --------------------------------------------------------------------------
def child_env() -> dict[str, str]:
    """The environment of a side's process: no PYTHONPATH (each side imports its own
    install) and no OPENMRC_PURE_PYTHON (both measured compiled)."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "OPENMRC_PURE_PYTHON", "PYTHONHOME"):
        env.pop(name, None)
    return env


def run_side(
    python: Path | str, script: Path, case: str, extra: Sequence[str], nice: int
) -> dict[str, object]:
    """One ``sim_speed.py --child CASE`` run of a side; its JSON with the child's own
    CPU seconds (``os.wait4``) as ``guard_cpu_seconds``."""
    argv = [str(python), str(script), "--child", case, *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, cwd=script.parent.parent, capture_output=True, env=child_env(),
        preexec_fn=lambda: os.nice(nice),
    )  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip()[-1500:]
        raise GuardError(f"{script} --child {case} failed ({proc.returncode}):\n{tail}")
    lines = proc.stdout.decode().strip().splitlines()
    if not lines:
        raise GuardError(f"{script} --child {case} printed nothing")
    got: dict[str, object] = json.loads(lines[-1])
    got["guard_wall_seconds"] = round(wall, 2)
    got["guard_cpu_seconds"] = round(
        after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2
    )
    return got
