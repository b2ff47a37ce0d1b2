"""The command line: the demo runs and checks itself; bad flags get clear errors."""

from __future__ import annotations

import json

import pytest

from openmrc.cli import main


def test_demo_small_run_reports_success(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "loopback", "--size", "4M", "--message", "256K", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["byte_exact"]
    assert report["paths"]["planes_used"] == list(range(8))
    assert report["paths"]["bad_by_plane"]["3"] > 0


def test_demo_text_output_over_the_wire_codec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "loopback", "--size", "2M", "--wire", "--blackhole-plane", "none"]) == 0
    out = capsys.readouterr().out
    assert "result: OK" in out and "byte-exact: True" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "loopback", "--loss", "2"], "loss: must be between 0 and 0.99"),
        (["demo", "loopback", "--size", "lots"], "size: 'lots' is not a size"),
        (["demo", "loopback", "--planes", "0"], "--planes"),
    ],
)
def test_bad_flags_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_inconsistent_demo_config_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "loopback", "--planes", "4", "--blackhole-plane", "9"]) == 2
    assert "blackhole_plane: must be 0..3" in capsys.readouterr().err
