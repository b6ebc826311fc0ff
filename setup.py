"""Build of the compiled reader kernel (everything else is in pyproject.toml)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "flowsplit.data._kernel",
                ["src/flowsplit/data/_kernel.pyx"],
                extra_compile_args=["-O2"],
            )
        ],
        language_level=3,
    )
)
