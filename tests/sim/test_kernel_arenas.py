"""The native kernel's huge-page arenas: Python's small objects made after the kernel
is imported live in 2 MiB-aligned regions marked for huge pages, arenas given back
are reused, ``OPENMRC_HUGE_ARENAS=0`` leaves the allocator alone, and a run's results
do not depend on it.  Each case runs in a fresh interpreter (the allocator is
installed once, at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sim.test_kernel import _RUN, MRC_SCENARIO, _kernel_required, kernel, native  # noqa: F401 (the fixture `native` names under OPENMRC_REQUIRE_NATIVE=1)

pytestmark = [
    native,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge-page arenas: Linux"),
]


def _run(code: str, **env: str) -> dict[str, object]:
    """Run ``code`` (which prints one JSON line last) with the kernel imported first."""
    full = dict(os.environ)
    full.pop("OPENMRC_HUGE_ARENAS", None)
    full.pop("PYTHONMALLOC", None)  # the arenas are pymalloc's
    full["OPENMRC_PURE_PYTHON"] = "0"
    full.update(env)
    prelude = "import json\nimport openmrc.sim._kernel as k\n"
    res = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_OBJECTS = """
class A:
    pass
xs = [A() for _ in range(200_000)]
"""


def test_new_objects_live_in_huge_arenas() -> None:
    got = _run(
        _OBJECTS
        + """
        s = k.huge_arenas()
        print(json.dumps({"s": s, "in": k.in_huge_arena(xs[-1]), "mod": k.in_huge_arena(k)}))
        """.replace("        ", "")
    )
    s = got["s"]
    assert isinstance(s, dict)
    assert s["installed"] is True
    assert s["regions"] >= 1 and s["live"] >= 1
    assert s["arena_bytes"] >= 4096
    assert got["in"] is True  # made after the import
    assert got["mod"] is False  # a static type, not in an arena


def test_arenas_given_back_are_reused() -> None:
    got = _run(
        _OBJECTS
        + """
        live = k.huge_arenas()["live"]
        del xs
        freed = k.huge_arenas()["live"]
        ys = [A() for _ in range(200_000)]
        s = k.huge_arenas()
        print(json.dumps({"live": live, "freed": freed, "s": s}))
        """.replace("        ", "")
    )
    s = got["s"]
    assert isinstance(s, dict)
    assert isinstance(got["live"], int) and isinstance(got["freed"], int)
    assert got["freed"] < got["live"]  # pymalloc gave empty arenas back
    assert s["reused"] >= got["live"] - got["freed"] - 1  # and got them again
    assert s["regions"] == 1  # 200,000 small objects fit one region twice over


def test_switched_off_by_the_environment() -> None:
    got = _run(
        _OBJECTS + 'print(json.dumps({"s": k.huge_arenas(), "in": k.in_huge_arena(xs[-1])}))\n',
        OPENMRC_HUGE_ARENAS="0",
    )
    s = got["s"]
    assert isinstance(s, dict)
    assert s["installed"] is False and s["regions"] == 0
    assert got["in"] is False


def test_results_do_not_depend_on_the_arenas(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(MRC_SCENARIO)
    docs = []
    for flag in ("1", "0"):
        env = dict(os.environ, OPENMRC_PURE_PYTHON="0", OPENMRC_HUGE_ARENAS=flag)
        env.pop("PYTHONMALLOC", None)
        code = _RUN + "import openmrc.sim._kernel as k; print(k.huge_arenas()['installed'])\n"
        out = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        lines = out.stdout.strip().splitlines()
        docs.append((lines[-1], json.loads(lines[-2])))
    (on_flag, on), (off_flag, off) = docs
    assert (on_flag, off_flag) == ("True", "False")
    assert on["native"] is True and on["result"]["all_ok"]
    assert json.dumps(on, sort_keys=True) == json.dumps(off, sort_keys=True)


def test_kernel_module_present() -> None:
    assert kernel is not None and hasattr(kernel, "huge_arenas")
