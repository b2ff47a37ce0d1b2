"""The pieces of ``sim_speed.py --vs-ref`` (benchmarks/speed_guard.py) that need no
build and time nothing: argument checks, the cache keys, the pairing arithmetic."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


#: htsim_uec's NSCC set-up lines as it prints them (one plane's rate: ``rate`` Gb/s,
#: a flow's window from the base RTT 21.35168 us at ``flow`` Gb/s).
def _nscc_lines(rate: int, flow: int) -> str:
    bdp = round(21.35168e-6 * flow * 1e9 / 8)
    return (
        "Initializing static NSCC parameters: _reference_network_linkspeed=100000000000 "
        f"_reference_network_rtt=12000000 _network_linkspeed={rate * 10**9} "
        "_network_rtt=21351680 _qa_gate=2^3\n"
        "Initialize per-instance NSCC parameters: flowid 1000000001 _base_rtt=21351680 "
        f"_base_bdp={bdp} _bdp={bdp} _min_cwnd=4160 _maxwnd={bdp * 3 // 2}\n"
    )


def _sim_speed() -> Any:
    """benchmarks/sim_speed.py as a module."""
    spec = importlib.util.spec_from_file_location(
        "sim_speed_for_htsim", ROOT / "benchmarks" / "sim_speed.py"
    )
    assert spec is not None and spec.loader is not None
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    return speed


def _fake_htsim(tmp_path: Path, rate: int, flow: int, new: int) -> tuple[Path, Path]:
    """A stand-in ``htsim_uec``: writes its argv and prints NSCC set-up and totals."""
    argv_file = tmp_path / "argv.txt"
    fake = tmp_path / "htsim_uec"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {argv_file}\n'
        f"cat <<'EOF'\n{_nscc_lines(rate, flow)}"
        f"New: {new} Rtx: 0 RTS: 0 Bounced: 0 ACKs: 40 NACKs: 0 Pulls: 0 sleek_pkts: 0\nEOF\n"
    )
    fake.chmod(0o755)
    return fake, argv_file


def test_vs_htsim_passes_planes_and_window_and_checks_the_window_work(tmp_path: Path) -> None:
    """``--vs-htsim`` with ``--planes`` and ``--until-us``: htsim is given ``-planes``
    and ``-end``, and a capped run's work is NSCC's rate and the new data packets
    both had sent."""
    speed = _sim_speed()
    fake, argv_file = _fake_htsim(tmp_path, 800, 800, 1000)
    got = speed.run_htsim(str(fake), 16, 100_000, 1, planes=8, until_us=30.0)
    argv = argv_file.read_text().split()
    assert argv[argv.index("-planes") + 1] == "8"
    assert argv[argv.index("-end") + 1] == "30"
    assert got["planes"] == 8 and got["new_packets"] == 1000
    assert got["nscc_gbps"] == 800.0 and got["window_gbps"] == 800.0
    mine = {"until_us": 30.0, "new_packets_sent": 1030, "flows_finished": 0, "nic_gbps": 800.0}
    check = speed.same_work(mine, got)
    assert check["ok"]
    assert list(check) == ["window_gbps", "nscc_gbps", "new_packets_sent", "ok"]
    assert not speed.same_work({**mine, "new_packets_sent": 1100}, got)["ok"]
    whole = speed.run_htsim(str(fake), 16, 100_000, 1)
    argv = argv_file.read_text().split()
    assert "-planes" not in argv and argv[argv.index("-end") + 1] == "100000"
    assert "median_fct_us" in speed.same_work({"until_us": None}, whole)


def test_same_work_refuses_the_unequal_eight_plane_window() -> None:
    """``perm-8192 --until-us 30 --planes 8`` against stock htsim_uec (asserts lifted):
    htsim sized NSCC from one plane's 100 Gb/s and sent 1,568,760 new data packets
    against openmrc's 4,005,888: refused on both counts, each on its own."""
    speed = _sim_speed()
    mine = {"until_us": 30.0, "new_packets_sent": 4_005_888, "nic_gbps": 800.0}
    stock = speed.parse_htsim(
        _nscc_lines(100, 100) + "New: 1568760 Rtx: 0 RTS: 0 Bounced: 0 ACKs: 9 NACKs: 0\n", 8192
    )
    check = speed.same_work(mine, stock)
    assert not check["ok"]
    assert not check["new_packets_sent"]["ok"] and not check["window_gbps"]["ok"]
    # the packets alone, with NSCC's rate the same on both sides
    same_rate = {**stock, "window_gbps": 800.0, "nscc_gbps": 800.0}
    assert not speed.same_work(mine, same_rate)["ok"]
    # the rate alone, with the packets the same (and a full run's checks too)
    assert not speed.same_work(mine, {**stock, "new_packets": 4_005_888})["ok"]
    assert not speed.same_work({**mine, "until_us": None}, {**stock, "nscc_gbps": 800.0})["ok"]
    # the patched build: both rates 800 Gb/s, packets within 5 %
    patched = speed.parse_htsim(
        _nscc_lines(800, 800) + "New: 3900000 Rtx: 0 RTS: 0 Bounced: 0 ACKs: 9 NACKs: 0\n", 8192
    )
    assert speed.same_work(mine, patched)["ok"]


def test_vs_htsim_exits_1_on_unequal_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Work that differs is named, with what to build, and the run exits 1 (its JSON
    still written); the same work exits 0."""
    speed = _sim_speed()
    mine = {
        "case": "perm-16", "until_us": 30.0, "new_packets_sent": 1000, "nic_gbps": 800.0,
        "total_seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_mib": 1.0,
        "events_per_cpu_second": 1, "traversals_per_cpu_second": 1, "events": 1,
        "packet_link_traversals": 1,
    }  # fmt: skip
    monkeypatch.setattr(speed, "run_child", lambda *a, **k: dict(mine))
    out = tmp_path / "r.json"
    argv = ["--case", "perm-16", "--planes", "8", "--until-us", "30", "--out", str(out)]
    fake, _ = _fake_htsim(tmp_path, 100, 100, 1000)
    assert speed.main([*argv, "--vs-htsim", str(fake)]) == 1
    err = capsys.readouterr().err
    assert "perm-16: NOT the same work" in err and speed.HTSIM_PLANES_PATCH.name in err
    assert len(json.loads(out.read_text())) == 2
    fake, _ = _fake_htsim(tmp_path, 800, 800, 1000)
    assert speed.main([*argv, "--vs-htsim", str(fake)]) == 0
    assert "NOT the same work" not in capsys.readouterr().err


def test_the_htsim_patch_is_where_the_benchmark_names_it() -> None:
    """The patch ``--vs-htsim`` names is in the tree and changes the files it says."""
    speed = _sim_speed()
    text = speed.HTSIM_PLANES_PATCH.read_text()
    assert speed.HTSIM_PLANES_PATCH.name in (speed.__doc__ or "")
    for path in ("datacenter/fat_tree_topology.cpp", "datacenter/main_uec.cpp", "sim/uec.h"):
        assert f"+++ b/htsim/sim/{path.removeprefix('sim/')}" in text


def test_a_window_of_htsim_counts_its_packets_at_the_flows_mean_links() -> None:
    """Stopped before any flow finished, htsim's traversals are its packets at the
    mean links of the permutation's pairs (here one pair under a T0, 2 links, and
    one over a T1, 4), not zero."""
    speed = _sim_speed()
    text = _nscc_lines(100, 100) + "New: 1000 Rtx: 10 RTS: 0 Bounced: 0 ACKs: 90 NACKs: 0\n"
    hosts = 16  # 4 hosts per T0
    got = speed.parse_htsim(text, hosts, [(0, 1), (0, 8)])
    assert got["flows_finished"] == 0
    assert got["packet_link_traversals_est"] == (1000 + 10 + 90) * 3


def test_perf_control_enables_the_profile_after_the_build(tmp_path: Path) -> None:
    """``--child ... --perf-control CTL,ACK`` writes perf's ``enable`` command once the
    case is built (and before its loop: the child waits for the acknowledgement) and
    refuses the option without ``--child`` or without two FIFOs."""
    import os
    import threading

    script = ROOT / "benchmarks" / "sim_speed.py"
    env = {**guard.child_env(), "PYTHONPATH": str(ROOT / "src")}
    ctl, ack = tmp_path / "ctl", tmp_path / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    got: list[str] = []

    def perf() -> None:  # what perf record --control does: read a command, acknowledge
        with open(ctl) as f:
            got.append(f.readline())
        with open(ack, "w") as f:
            f.write("ack\n")

    t = threading.Thread(target=perf, daemon=True)
    t.start()
    out = subprocess.run(
        [sys.executable, str(script), "--child", "perm-16", "--until-us", "2",
         "--perf-control", f"{ctl},{ack}"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    t.join(5)
    assert out.returncode == 0, out.stderr
    assert got == ["enable\n"]
    assert json.loads(out.stdout.strip().splitlines()[-1])["events"] > 0
    for argv in (
        ["--case", "perm-16", "--perf-control", "a,b"],
        ["--child", "perm-16", "--perf-control", "a"],
    ):
        out = subprocess.run(
            [sys.executable, str(script), *argv], capture_output=True, text=True, env=env
        )
        assert out.returncode == 2 and "--perf-control: CTL,ACK" in out.stderr


def test_ranks_with_pairs_alternate_the_runs_and_report_the_median(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--ranks 2 --pairs 3``: an untimed sequential warm-up to 1 us, then sequential,
    partitioned; partitioned, sequential; and again; a line per pair, then the median
    of the pairs' event-loop speed-ups."""
    speed = _sim_speed()
    calls: list[int | None] = []
    # the warm-up's wall (not counted), then pairs 1.5x, 2.2x, 1.8x
    walls = iter([99.0, 30.0, 20.0, 15.0, 33.0, 36.0, 20.0])

    def fake(case: str, size: int, seed: int, planes: int, until: Any, ranks: Any) -> Any:
        calls.append(-1 if until == 1.0 else ranks)  # -1: the warm-up, to 1 us
        wall = next(walls)
        run = {"wall_seconds": wall, "total_seconds": wall + 1, "kernel": "native"}
        run |= {"events": 5, "packet_link_traversals": 3, "simulated_us": 9.0}
        run |= {"median_fct_us": 4.0, "all_ok": True}
        if ranks is not None:
            rank = {"rank": 0, "events": 5, "cpu_s": 1.0, "idle_s": 0.1, "packets_sent": 2}
            rank["peak_rss_mib"] = 64.0
            run["parallel"] = {"windows": 4, "window_ps": 1_562_500, "per_rank": [rank]}
        return run

    monkeypatch.setattr(speed, "run_child", fake)
    args = speed.argparse.Namespace(ranks=2, pairs=3, size=1, seed=1, planes=8, until_us=None)
    runs = speed.speedup("perm-64", args)
    assert calls == [-1, None, 2, 2, None, None, 2] and len(runs) == 6
    err = capsys.readouterr().err.splitlines()
    assert [line.split("event loop ")[1].split(",")[0] for line in err[:3]] == [
        "30.0 s -> 20.0 s = 1.50x",
        "33.0 s -> 15.0 s = 2.20x",
        "36.0 s -> 20.0 s = 1.80x",
    ]
    assert err[3] == (
        "perm-64: 2 ranks vs the sequential run, event loop, median of 3 pairs 1.80x "
        "(each 1.50, 2.20, 1.80)"
    )
    calls.clear()
    walls = iter([99.0, 30.0, 20.0])
    runs = speed.speedup("perm-64", speed.argparse.Namespace(**{**vars(args), "pairs": None}))
    assert calls == [-1, None, 2] and len(capsys.readouterr().err.splitlines()) == 1


def test_ranks_refuse_no_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    """``--ranks 2 --pairs 0``: one line naming the option, exit 2 (not a run of nothing)."""
    speed = _sim_speed()
    with pytest.raises(SystemExit) as exc:
        speed.main(["--case", "perm-64", "--ranks", "2", "--pairs", "0"])
    assert exc.value.code == 2
    assert "--pairs: must be at least 1 (got 0)" in capsys.readouterr().err


def test_vs_ref_swaps_the_order_each_pair_and_reports_the_median(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--vs-ref REF --pairs 3``: an untimed warm-up of each side (the case to 1 us),
    then work, ref; ref, work; work, ref (neither side always first), each pair's ratio
    paired by side whatever the order, and their median."""
    speed = _sim_speed()
    order: list[str] = []
    # in run order: the two warm-ups (not counted), then pairs 1.2, 1.25, 3.0
    cpu = iter([99.0, 99.0, 12.0, 10.0, 8.0, 10.0, 30.0, 10.0])

    def fake_side(python: Path, script: Path, case: str, extra: Any, nice: int) -> Any:
        order.append(str(python) + (" warm" if extra[-2:] == ["--until-us", "1.0"] else ""))
        return {"guard_cpu_seconds": next(cpu), "events": 7, "packet_link_traversals": 3}

    monkeypatch.setattr(guard, "resolve_ref", lambda repo, ref: "a" * 40)
    monkeypatch.setattr(guard, "ensure_ref", lambda repo, sha, nice: (Path("ref"), Path("r")))
    monkeypatch.setattr(guard, "ensure_work", lambda repo, nice: (Path("w/b/p/work"), Path("w")))
    monkeypatch.setattr(guard, "run_side", fake_side)
    args = speed.argparse.Namespace(
        pairs=3, nice=10, vs_ref="main", work_python=None, work_ref=None, size=1, seed=1,
        planes=1, until_us=None, case=["perm-64"], out=tmp_path / "g.json",
    )  # fmt: skip
    assert speed.vs_ref(args) == 0
    assert order == [
        "w/b/p/work warm", "ref warm",
        "w/b/p/work", "ref", "ref", "w/b/p/work", "w/b/p/work", "ref",
    ]  # fmt: skip
    row = json.loads((tmp_path / "g.json").read_text())[0]
    assert row["pair_ratios"] == [1.2, 1.25, 3.0]
    assert row["pair_ratio_median"] == 1.25
    assert row["cpu_ratio"] == round(52.0 / 28.0, 3)
    err = capsys.readouterr().err
    assert "pair 2/3 (ref first): work 10.0 s CPU" in err
    assert "(each 1.2, 1.25, 3.0; median 1.25x)" in err
