"""The documentation's runnable examples run and do what their text says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_protocol_five_minute_example_runs_and_moves_the_bytes() -> None:
    """docs/protocol.md's first example is complete: it runs as written, checks the
    destination byte for byte and prints the completions the text shows."""
    code = _python_blocks(ROOT / "docs" / "protocol.md")[0]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "(1, 'SUCCESS', None), (7, 'SUCCESS', 42)" in out.stdout


def test_readme_example_runs() -> None:
    """The README's transport example runs as written (it asserts the bytes arrived)."""
    code = _python_blocks(ROOT / "README.md")[0]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
