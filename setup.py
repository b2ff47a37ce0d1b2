"""Build script: the package metadata is in pyproject.toml; this file adds compiled modules.

Everything here is optional: when a part cannot be built the package installs as
pure Python and runs the same code (``openmrc --version`` says which modules are
compiled).
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup

ext_modules: list = []


# ----- mypyc: the transport core, the packet classes and the simulator's NIC ------------
# Compiled with mypyc when mypy (a build requirement) and a C compiler are available and
# OPENMRC_NO_COMPILE is not set; otherwise these modules install as plain Python.
# OPENMRC_PURE_PYTHON=1 at run time imports the .py sources even when compiled.
MYPYC_MODULES = [
    "src/openmrc/wire/packets.py",
    "src/openmrc/wire/codec.py",
    "src/openmrc/wire/srv6.py",
    "src/openmrc/wire/pcap.py",
    "src/openmrc/transport/attrs.py",
    "src/openmrc/transport/context.py",
    "src/openmrc/transport/paths.py",  # compiles unchanged; drop this line if a rewrite won't
    "src/openmrc/transport/controller.py",
    "src/openmrc/transport/errors.py",
    "src/openmrc/transport/ev.py",
    "src/openmrc/transport/qp.py",
    "src/openmrc/transport/qpbase.py",
    "src/openmrc/transport/requester.py",
    "src/openmrc/transport/responder.py",
    "src/openmrc/transport/sendop.py",
    "src/openmrc/transport/state.py",
    "src/openmrc/transport/txtable.py",
    "src/openmrc/transport/verbs.py",
    "src/openmrc/transport/cc/base.py",
    "src/openmrc/transport/cc/fixed.py",
    "src/openmrc/transport/cc/nscc.py",
    "src/openmrc/sim/host.py",
    "src/openmrc/baselines/roce.py",
]


def _have_c_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    return bool(cc) and shutil.which(os.environ.get("CC", cc[0]).split()[0]) is not None


def _remove_stale_builds() -> None:
    """Delete compiled modules an earlier editable (in-place) build left beside the
    sources: installing pure Python must not leave the old compiled code running."""
    from importlib.machinery import EXTENSION_SUFFIXES

    here = os.path.dirname(os.path.abspath(__file__))
    stale = [
        os.path.join(here, m[: -len(".py")] + s) for m in MYPYC_MODULES for s in EXTENSION_SUFFIXES
    ]
    stale += glob.glob(os.path.join(here, "src", "*__mypyc.*"))
    for path in stale:
        if os.path.exists(path):
            os.remove(path)


def _mypyc_extensions() -> list:
    if {"egg_info", "dist_info"} & set(sys.argv[1:]):
        return []  # metadata only (pip asks for it first): no need to type-check
    if os.environ.get("OPENMRC_NO_COMPILE", "") not in ("", "0"):
        print("openmrc: OPENMRC_NO_COMPILE is set, installing pure Python", file=sys.stderr)
        _remove_stale_builds()
        return []
    if not _have_c_compiler():
        print("openmrc: no C compiler found, installing pure Python", file=sys.stderr)
        _remove_stale_builds()
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("openmrc: mypyc not available, installing pure Python", file=sys.stderr)
        _remove_stale_builds()
        return []
    try:
        exts = mypycify(MYPYC_MODULES, opt_level="3", debug_level="0")
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error it cannot compile
        print(f"openmrc: mypyc failed ({exc}), installing pure Python", file=sys.stderr)
        _remove_stale_builds()
        return []
    for ext in exts:
        ext.optional = True  # a failed compile leaves the pure-Python module in place
    return exts


ext_modules += _mypyc_extensions()

# ----- the simulator's native event kernel (openmrc.sim._kernel) -------------------------
# Hand-written C (src/openmrc/sim/_kernel.c).  Optional: without a C compiler the build
# goes on without it and the simulator runs its pure-Python classes (the same results,
# slower).  OPENMRC_PURE_PYTHON=1 forces the pure-Python classes at run time even when
# it was built; OPENMRC_NO_COMPILE=1 skips building it.
KERNEL_EXTENSIONS = [
    Extension(
        "openmrc.sim._kernel",
        sources=["src/openmrc/sim/_kernel.c"],
        extra_compile_args=["-O2"],
        optional=True,
    )
]
if os.environ.get("OPENMRC_NO_COMPILE", "") in ("", "0"):
    ext_modules += KERNEL_EXTENSIONS
# ----- end of the kernel part ------------------------------------------------------------
# ----- end of the mypyc part --------------------------------------------------------------

setup(ext_modules=ext_modules)
