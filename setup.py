"""Build of the compiled reader kernel (everything else is in pyproject.toml)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "flowsplit.reader._kernel",
                ["src/flowsplit/reader/_kernel.pyx"],
                # No fused multiply-adds: float results must be NumPy's bit for bit.
                extra_compile_args=["-O2", "-ffp-contract=off"],
            )
        ],
        language_level=3,
    )
)
