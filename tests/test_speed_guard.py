"""The pieces of ``sim_speed.py --vs-ref`` (benchmarks/speed_guard.py) that need no
build and time nothing: argument checks, the cache keys, the pairing arithmetic."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "speed_guard", ROOT / "benchmarks" / "speed_guard.py"
)
assert _spec is not None and _spec.loader is not None
guard = importlib.util.module_from_spec(_spec)
sys.modules["speed_guard"] = guard
_spec.loader.exec_module(guard)


def test_pairing_ratio_is_work_over_ref_of_the_sums() -> None:
    p = guard.Pairing()
    p.add(12.0, 10.0)
    p.add(9.0, 10.0)
    p.add(12.0, 8.0)
    assert p.pair_ratios() == pytest.approx([1.2, 0.9, 1.5])
    assert p.ratio() == pytest.approx(33.0 / 28.0)
    s = p.summary()
    assert s["pairs"] == 3
    assert s["cpu_ratio"] == round(33.0 / 28.0, 3)
    assert s["work_cpu_median"] == 12.0 and s["ref_cpu_median"] == 10.0


def test_pairing_refuses_empty_and_zero() -> None:
    p = guard.Pairing()
    with pytest.raises(guard.GuardError, match="no pairs"):
        p.ratio()
    with pytest.raises(guard.GuardError, match="no CPU time"):
        p.add(0.0, 1.0)


@pytest.mark.parametrize("bad", [0, -1])
def test_pairs_must_be_positive(bad: int) -> None:
    with pytest.raises(guard.GuardError, match="--pairs"):
        guard.check_pairs(bad)
    assert guard.check_pairs(3) == 3


@pytest.mark.parametrize("bad", [-1, 20])
def test_nice_range(bad: int) -> None:
    with pytest.raises(guard.GuardError, match="--nice"):
        guard.check_nice(bad)
    assert guard.check_nice(0) == 0 and guard.check_nice(19) == 19


def test_ref_key_is_full_sha_and_python() -> None:
    sha = "62e7d5af768dbfc51fb1d0e0008e2b60e95c9c7f"
    assert guard.ref_key(sha, guard.python_tag((3, 11))) == f"{sha}-py3.11"
    for bad in ("62e7d5a", "main", sha.upper(), sha[:-1] + "g"):
        with pytest.raises(guard.GuardError, match="full commit id"):
            guard.ref_key(bad, "py3.11")


def test_content_key_follows_every_byte_and_path_not_order() -> None:
    a = {"src/x.py": b"x = 1\n", "setup.py": b""}
    same = {"setup.py": b"", "src/x.py": b"x = 1\n"}
    assert guard.content_key(a, "py3.11") == guard.content_key(same, "py3.11")
    assert guard.content_key(a, "py3.11").startswith("work-")
    assert guard.content_key(a, "py3.11").endswith("-py3.11")
    changed = {"src/x.py": b"x = 2\n", "setup.py": b""}
    moved = {"src/y.py": b"x = 1\n", "setup.py": b""}
    # a path/content split that concatenates the same must still differ
    shifted = {"src/x.py": b"x = 1\n", "setup.p": b"y"}
    keys = {guard.content_key(d, "py3.11") for d in (a, changed, moved, shifted)}
    assert len(keys) == 4
    assert guard.content_key(a, "py3.12") != guard.content_key(a, "py3.11")


def test_cache_root_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(guard.CACHE_ENV, str(tmp_path))
    assert guard.cache_root() == tmp_path
    monkeypatch.delenv(guard.CACHE_ENV)
    assert guard.cache_root() == Path.home() / ".cache" / "openmrc-ref"


def test_resolve_ref_names_a_bad_ref(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(guard.GuardError, match="not a commit"):
        guard.resolve_ref(tmp_path, "no-such-branch")
    with pytest.raises(guard.GuardError, match="not a commit name"):
        guard.resolve_ref(tmp_path, "--all")


def test_child_env_drops_path_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/src")
    monkeypatch.setenv("OPENMRC_PURE_PYTHON", "1")
    env = guard.child_env()
    assert "PYTHONPATH" not in env and "OPENMRC_PURE_PYTHON" not in env


def test_sim_speed_refuses_bad_guard_arguments() -> None:
    script = ROOT / "benchmarks" / "sim_speed.py"
    env = {**guard.child_env(), "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, str(script), "--vs-ref", "no-such-ref-xyz", "--case", "perm-16"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--vs-ref: 'no-such-ref-xyz' is not a commit" in out.stderr
    assert "Traceback" not in out.stderr
    out = subprocess.run(
        [sys.executable, str(script), "--vs-ref", "HEAD", "--pairs", "0"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert out.returncode == 2 and "--pairs: must be at least 1" in out.stderr
    out = subprocess.run(
        [sys.executable, str(script), "--vs-ref", "HEAD", "--ranks", "2"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert out.returncode == 2 and "--vs-ref: not with" in out.stderr


def test_two_guards_wanting_one_build_build_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two guards asking for the same build at once: one builds, the other waits and
    reuses it (without the lock both build, the second deleting the first's tree)."""
    import threading
    import time

    builds: list[Path] = []

    def fake_build(tree: Path, nice: int, log: Path) -> Path:
        builds.append(tree)
        time.sleep(0.3)  # long enough for the other guard to arrive mid-build
        python = tree.parent / "venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("")
        return python

    monkeypatch.setattr(guard, "build", fake_build)
    monkeypatch.setattr(guard, "require_compiled", lambda python, what: {})
    home = tmp_path / "ref-py3.11"
    got: list[tuple[Path, Path]] = []

    def want() -> None:
        got.append(guard._ensure(home, lambda tree: (tree / "f").write_text("x"), 0, "ref"))

    threads = [threading.Thread(target=want) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1
    assert len(got) == 2 and got[0] == got[1] and got[0][0].exists()


def test_sim_speed_names_a_bad_ring_case() -> None:
    script = ROOT / "benchmarks" / "sim_speed.py"
    env = {**guard.child_env(), "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, str(script), "--child", "ring-loss1-tcp"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert out.returncode != 0
    assert "--case ring-loss1-tcp: the transport must be one of mrc, roce-1qp" in out.stderr
    assert "Traceback" not in out.stderr


def test_vs_ref_runs_both_sides_in_the_same_window() -> None:
    spec = importlib.util.spec_from_file_location(
        "sim_speed_for_guard", ROOT / "benchmarks" / "sim_speed.py"
    )
    assert spec is not None and spec.loader is not None
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    whole = speed.child_args(2_000_000, 1, 8, None)
    assert whole == ["--size", "2000000", "--seed", "1", "--planes", "8"]
    window = speed.child_args(2_000_000, 1, 8, 30.0)
    assert window == [*whole, "--until-us", "30.0"]


def test_a_pure_python_build_names_its_cause(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A build that came out pure Python is refused with setup.py's own reason from the
    log (pip -v keeps it there), not a bare "not compiled"."""

    def fake_build(tree: Path, nice: int, log: Path) -> Path:
        log.write_text(
            "Running setup.py develop\n"
            "openmrc: mypyc failed (MemoryError), installing pure Python\n"
            "done\n"
        )
        return tmp_path / "python"

    def refuse(python: Path | str, what: str) -> dict[str, object]:
        raise guard.GuardError(f"{what}: openmrc at X is not compiled")

    monkeypatch.setattr(guard, "build", fake_build)
    monkeypatch.setattr(guard, "require_compiled", refuse)
    home = tmp_path / "home"
    with pytest.raises(guard.GuardError, match=r"mypyc failed \(MemoryError\)"):
        guard._ensure(home, lambda tree: None, 0, "the working tree")
    assert not (home / guard.BUILT_MARKER).exists()


def test_vs_htsim_passes_planes_and_window_and_checks_the_window_work(tmp_path: Path) -> None:
    """``--vs-htsim`` with ``--planes`` and ``--until-us``: htsim is given ``-planes``
    and ``-end``, and a capped run's work is the new data packets both had sent."""
    spec = importlib.util.spec_from_file_location(
        "sim_speed_for_htsim", ROOT / "benchmarks" / "sim_speed.py"
    )
    assert spec is not None and spec.loader is not None
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    argv_file = tmp_path / "argv.txt"
    fake = tmp_path / "htsim_uec"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {argv_file}\n'
        "echo 'New: 1000 Rtx: 0 RTS: 0 Bounced: 0 ACKs: 40 NACKs: 0 Pulls: 0 sleek_pkts: 0'\n"
    )
    fake.chmod(0o755)
    got = speed.run_htsim(str(fake), 16, 100_000, 1, planes=8, until_us=30.0)
    argv = argv_file.read_text().split()
    assert argv[argv.index("-planes") + 1] == "8"
    assert argv[argv.index("-end") + 1] == "30"
    assert got["planes"] == 8 and got["new_packets"] == 1000
    mine = {"until_us": 30.0, "new_packets_sent": 1030, "flows_finished": 0}
    check = speed.same_work(mine, got)
    assert check["ok"] and list(check) == ["new_packets_sent", "ok"]
    assert not speed.same_work({**mine, "new_packets_sent": 1100}, got)["ok"]
    whole = speed.run_htsim(str(fake), 16, 100_000, 1)
    argv = argv_file.read_text().split()
    assert "-planes" not in argv and argv[argv.index("-end") + 1] == "100000"
    assert "median_fct_us" in speed.same_work({"until_us": None}, whole)
