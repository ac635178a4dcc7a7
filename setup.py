"""The optional C extension of the shared ring (everything else is in pyproject.toml).

``elastream.ipc._ringfast`` holds the ring's hot paths; without a C compiler the
build skips it (``optional=True``) and the ring runs its Python paths.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("elastream.ipc._ringfast", ["src/elastream/ipc/_ringfast.c"],
                             extra_compile_args=["-O2"], optional=True)])
