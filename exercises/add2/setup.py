"""setup.py — given, complete: builds add2 as a torch extension with setuptools.

    TORCH_EXTENSION_NAME=add2 python setup.py build_ext --inplace   # add2*.so here
    python -c "import torch; torch.ops.load_library('add2.cpython-...so'); print(torch.ops.add2.add2)"

(the document runs `python setup.py install`; in place is enough to load it). The grader sets
TORCH_EXTENSION_NAME to a name of its own, so your operator and the solution's load side by side.
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

NAME = os.environ.get("TORCH_EXTENSION_NAME", "add2")  # BuildExtension defines it for the sources too

setup(
    name=NAME,
    ext_modules=[
        CUDAExtension(
            NAME, ["add2_ops.cpp", "add2_kernel.cu"], extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "-lineinfo"]}
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
