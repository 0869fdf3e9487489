"""Declares the compiled extension `dledger._store` (everything else is in pyproject.toml)."""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

macros = []
libraries = []
if os.path.exists("/usr/include/libdeflate.h"):
    macros.append(("DL_HAVE_LIBDEFLATE", "1"))
    libraries.append("deflate")
else:
    libraries.append("z")

extensions = [
    Extension(
        "dledger._store",
        ["dledger/_store.pyx"],
        include_dirs=["native"],
        define_macros=macros,
        libraries=libraries,
        extra_compile_args=["-O3", "-fno-strict-aliasing"],
    )
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
