"""Triton: a Python function taking torch tensors, with Triton kernels inside. Without a GPU it runs under
Triton's interpreter, so it gets a numerics verdict on any machine."""

from grader.kinds import Kind

KIND = Kind(
    "triton",
    lang="triton",
    entry="a Python function taking torch tensors (Triton kernels inside)",
    suffixes=(".py", ".ipynb"),
    loader="grader.child.loading:load_python",
    interpreted=True,
    compiles_when_run=True,
    python_entry=True,
    sanitizer_tools=("memcheck",),
    prewarm="triton",
    watch_ops=True,
)
