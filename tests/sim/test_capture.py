"""The simulator writes pcap files that tshark decodes down to the BTH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from openmrc.cli import main
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.wire.packets import Opcode
from openmrc.workloads import single


def tshark_bth(path: Path) -> list[tuple[int, int]]:
    """(opcode, PSN) of every RoCE packet tshark finds in ``path``."""
    out = subprocess.run(
        [
            "tshark", "-n", "-r", str(path), "-o", "udp.ignore_ipv6_zero_checksum:TRUE",
            "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=,",
            "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
        ],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    rows = []
    for line in out.splitlines():
        parts = line.split(",")
        if len(parts) == 2 and parts[0] and parts[1]:
            rows.append((int(parts[0], 0), int(parts[1], 0)))
    return rows


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_simulator_capture_decodes_in_tshark(tmp_path: Path) -> None:
    spec = ClosSpec(planes=2, t0s=2, hosts_per_t0=1, t1s=2)
    exp = Experiment(spec, seed=1)
    exp.add_flows(single(0, 1, 40_000, message=40_000))
    pcap = tmp_path / "sim.pcap"
    cap = exp.capture(pcap, hosts=[0])
    r = exp.run()
    assert r.all_ok
    rows = tshark_bth(pcap)
    assert len(rows) == cap.packets > 0
    data_ops = (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST_IMM)
    data = [(op, psn) for op, psn in rows if op in data_ops]
    # 40,000 bytes in 4 KiB packets: PSNs 0..9, FIRST then MIDDLEs then LAST.
    assert sorted(psn for _, psn in data) == list(range(10))
    assert dict((psn, op) for op, psn in data)[0] == Opcode.WRITE_FIRST
    assert (
        dict((psn, op) for op, psn in data)[9] == Opcode.WRITE_LAST_IMM
    )  # the flow ends with an immediate
    assert any(op == Opcode.SACK for op, _ in rows)  # the ACKs host 0 received


def test_cli_pcap_option_and_bad_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        "[fabric]\nplanes = 1\nt0s = 2\nhosts_per_t0 = 1\nt1s = 1\n"
        '[workload]\nkind = "single"\nsrc = 0\ndst = 1\nsize = 8192\n'
    )
    pcap = tmp_path / "x.pcap"
    assert main(["sim", str(scen), "--pcap", str(pcap), "--pcap-hosts", "1"]) == 0
    assert pcap.stat().st_size > 24
    assert main(["sim", str(scen), "--pcap", str(pcap), "--pcap-hosts", "7"]) == 2
    assert "--pcap-hosts: host 7" in capsys.readouterr().err


def test_capture_of_a_baseline_transport_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text(
        "[fabric]\nplanes = 1\nt0s = 2\nhosts_per_t0 = 1\nt1s = 1\n"
        '[workload]\nkind = "single"\nsrc = 0\ndst = 1\nsize = 8192\n'
    )
    assert main(["sim", str(scen), "--transport", "roce", "--pcap", str(tmp_path / "r.pcap")]) == 2
    assert "pcap capture is available for the 'mrc' transport" in capsys.readouterr().err
