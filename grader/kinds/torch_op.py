"""A PyTorch operator: CUDA registered with TORCH_LIBRARY, built by the child with torch's extension builder
(JIT or CMake). It returns its outputs; the aten calls it makes are its own. Without a GPU it is only
compiled (a syntax check of its .cu with the host compiler)."""

from grader.kinds import Kind

KIND = Kind(
    "torch_op",
    lang="cuda",
    entry="a PyTorch operator registered with TORCH_LIBRARY, built with torch's extension builder",
    suffixes=(".cu",),
    loader="grader.child.loading:load_torch_op",
    builder="grader.run.grade:build_torch_op",
    gpu_to_run=True,
    builds_in_child=True,
    sanitizer_tools=("racecheck", "synccheck", "memcheck"),
    prewarm="profiler",
    watch_ops=True,
    returns_outputs=True,
    op_library=True,
)
