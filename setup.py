"""The optional C extensions (everything else is in pyproject.toml).

``elastream.ipc._ringfast`` holds the ring's hot paths, ``elastream.ipc._rowsfast`` the codec's
packing of flat numeric rows, ``elastream.ordered._splitfast``
the keyed split's routing loop, ``elastream.runtime._untrack`` the eager untracking of
kept results from the cycle collector; without a C compiler the build skips them
(``optional=True``) and the same code runs in Python.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("elastream.ipc._ringfast", ["src/elastream/ipc/_ringfast.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("elastream.ipc._rowsfast", ["src/elastream/ipc/_rowsfast.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("elastream.ordered._splitfast", ["src/elastream/ordered/_splitfast.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("elastream.runtime._untrack", ["src/elastream/runtime/_untrack.c"],
                             extra_compile_args=["-O2"], optional=True)])
