"""Build hooks that pyproject.toml cannot express: the optional native extensions.

Everything else (metadata, dependencies, packages) is in pyproject.toml.
"""

from setuptools import Extension, setup

# --- the simulator's native event kernel (openmrc.sim._kernel) ---------------------
# Optional: without a C compiler the build goes on without it and the simulator
# runs its pure-Python classes (the same results, slower).  OPENMRC_PURE_PYTHON=1
# forces the pure-Python classes at run time even when it was built.
KERNEL_EXTENSIONS = [
    Extension(
        "openmrc.sim._kernel",
        sources=["src/openmrc/sim/_kernel.c"],
        extra_compile_args=["-O2"],
        optional=True,
    )
]
# ------------------------------------------------------------------------------------

setup(ext_modules=KERNEL_EXTENSIONS)
