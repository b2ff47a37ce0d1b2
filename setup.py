"""Build script: the package metadata is in pyproject.toml; this file adds compiled modules.

Everything here is optional: when a part cannot be built the package installs as
pure Python and runs the same code (``openmrc --version`` says which modules are
compiled).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

# ----- mypyc: the transport core, the packet classes, the simulator's NIC, the flow level -
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
    "src/openmrc/transport/reverse.py",
    "src/openmrc/transport/sendop.py",
    "src/openmrc/transport/state.py",
    "src/openmrc/transport/txtable.py",
    "src/openmrc/transport/verbs.py",
    "src/openmrc/transport/cc/base.py",
    "src/openmrc/transport/cc/fixed.py",
    "src/openmrc/transport/cc/nscc.py",
    "src/openmrc/sim/host.py",
    "src/openmrc/sim/pyport.py",  # the Python port, the baseline port's base
    "src/openmrc/baselines/roce.py",
    "src/openmrc/baselines/datapath.py",  # the baseline fabric's port and switch
    "src/openmrc/baselines/nic.py",  # the baseline's NIC
    "src/openmrc/flow/dcqcn.py",
    "src/openmrc/flow/model.py",  # the flow level's max-min filling (FluidModel._run)
]


def _have_c_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    return bool(cc) and shutil.which(os.environ.get("CC", cc[0]).split()[0]) is not None


def _remove_stale_builds() -> None:
    """Delete compiled modules an earlier editable (in-place) build left beside the
    sources: installing pure Python must not leave the old compiled code running."""
    from importlib.machinery import EXTENSION_SUFFIXES

    stale = [
        os.path.join(HERE, m[: -len(".py")] + s) for m in MYPYC_MODULES for s in EXTENSION_SUFFIXES
    ]
    stale += glob.glob(os.path.join(HERE, "src", "*__mypyc.*"))
    stale += glob.glob(os.path.join(HERE, "src", "openmrc", "sim", "_kernel.*.so"))
    stale += glob.glob(os.path.join(HERE, "src", "openmrc", "transport", "_txtable.*.so"))
    stale += glob.glob(os.path.join(HERE, "src", "openmrc", "transport", "_draws.*.so"))
    stale.append(STAMP)
    for path in stale:
        if os.path.exists(path):
            os.remove(path)


# ----- reuse: an editable install whose sources did not change builds nothing ----------
# `pip install -e '.[x]'` after a first editable install (another extra, say) would
# type-check and compile everything again (minutes).  The first build records a
# fingerprint of what went into it (every source file of the package, this script, the
# interpreter, mypy's version and the compiler settings) and the compiled files it left
# beside the sources; a later editable install with the same fingerprint, and all those
# files still there, keeps them and compiles nothing.  A non-editable install (a wheel)
# always builds.  OPENMRC_REBUILD=1 forces a build.
STAMP = os.path.join(HERE, "build", "openmrc-compiled.json")


def _fingerprint() -> str:
    h = hashlib.sha256()
    try:
        from mypy.version import __version__ as mypy_version
    except ImportError:
        mypy_version = "none"
    for part in (
        sys.version,
        sysconfig.get_config_var("EXT_SUFFIX"),
        mypy_version,
        os.environ.get("CC", ""),
        os.environ.get("CFLAGS", ""),
    ):
        h.update(f"{part}\0".encode())
    package = os.path.join(HERE, "src", "openmrc", "**")
    sources = sorted(glob.glob(os.path.join(package, "*.py"), recursive=True))
    # the hand-written C extensions (the event kernel, the requester's records)
    sources += sorted(glob.glob(os.path.join(package, "*.c"), recursive=True))
    sources.append(os.path.abspath(__file__))
    for path in sources:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, HERE).encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def _editable() -> bool:
    return "editable_wheel" in sys.argv[1:]


def _reusable() -> bool:
    """True when an editable install can keep the compiled files of the last build."""
    if not _editable() or os.environ.get("OPENMRC_REBUILD", "") not in ("", "0"):
        return False
    try:
        with open(STAMP) as f:
            stamp = json.load(f)
    except (OSError, ValueError):
        return False
    files = stamp.get("files") or []
    return (
        stamp.get("fingerprint") == _fingerprint()
        and bool(files)
        and all(os.path.exists(os.path.join(HERE, p)) for p in files)
    )


def _inplace_path(name: str) -> str:
    return os.path.join("src", *name.split(".")) + sysconfig.get_config_var("EXT_SUFFIX")


class _RecordingBuildExt(build_ext):
    """build_ext that, in an editable install where every extension built, records the
    fingerprint and the compiled files for the next install to reuse."""

    def run(self) -> None:
        super().run()
        if not _editable() or not self.extensions:
            return
        files = [_inplace_path(ext.name) for ext in self.extensions]
        if not all(os.path.exists(os.path.join(HERE, p)) for p in files):
            return  # an optional part failed: build again next time
        os.makedirs(os.path.dirname(STAMP), exist_ok=True)
        with open(STAMP, "w") as f:  # the inputs as they were when the build began
            json.dump({"fingerprint": _BUILT_FROM[0], "files": files}, f, indent=1)


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
    hidden = _group_visibility_args()
    for ext in exts:
        ext.optional = True  # a failed compile leaves the pure-Python module in place
        if ext.name.endswith("__mypyc"):  # the group's shared library, not a module's shim
            ext.extra_compile_args = [*ext.extra_compile_args, *hidden]
    return exts


def _group_visibility_args() -> list[str]:
    """Compile flags that keep the mypyc group's functions inside its shared library.

    mypyc compiles every module into one `-fPIC` library whose functions
    (`CPyDef_*`, the runtime's helpers) would be exported: then each call between them
    goes through a PLT stub and none is inlined into another, since the dynamic linker
    could swap it.  Nothing outside needs them (a module's shim reaches the group through
    a capsule; `PyInit_*` stays exported by `PyMODINIT_FUNC`), so they are hidden.  On
    Linux its calls into CPython also skip the PLT stub (`-fno-plt`: one indirect call
    through the GOT, the stubs' code out of the instruction cache).  GCC and Clang only:
    given where mypyc passes its own GCC-style flags (a "unix" compiler).
    """
    from distutils import ccompiler
    from distutils import sysconfig as dist_sysconfig

    compiler = ccompiler.new_compiler()
    dist_sysconfig.customize_compiler(compiler)
    if compiler.compiler_type != "unix":
        return []
    return ["-fvisibility=hidden", *(["-fno-plt"] if sys.platform.startswith("linux") else [])]


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
    ),
    # The requester's per-transmission records (src/openmrc/transport/_txtable.c):
    # native TxTable and EvOrder, selected by openmrc.transport.txtable the same way.
    Extension(
        "openmrc.transport._txtable",
        sources=["src/openmrc/transport/_txtable.c"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
    # A QP's EV draws (src/openmrc/transport/_draws.c): native shuffle and picks and a
    # generated profile's whole draw, selected by openmrc.transport.paths the same way.
    Extension(
        "openmrc.transport._draws",
        sources=["src/openmrc/transport/_draws.c"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
]
# ----- end of the kernel part ------------------------------------------------------------
# ----- end of the mypyc part --------------------------------------------------------------


#: the fingerprint of the sources a build starts from (a file edited during the build
#: then makes the next install build again)
_BUILT_FROM: list[str] = [""]


def _ext_modules() -> list:
    """What this install compiles: nothing when an editable install can reuse the last
    build, else the mypyc modules and the native kernel (each optional)."""
    _BUILT_FROM[0] = _fingerprint()
    if _reusable():
        print(
            "openmrc: sources unchanged since the last build, reusing its compiled modules "
            "(OPENMRC_REBUILD=1 builds again)",
            file=sys.stderr,
        )
        return []
    exts = _mypyc_extensions()
    if os.environ.get("OPENMRC_NO_COMPILE", "") in ("", "0"):
        exts += KERNEL_EXTENSIONS
    return exts


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import its helpers
    setup(ext_modules=_ext_modules(), cmdclass={"build_ext": _RecordingBuildExt})
