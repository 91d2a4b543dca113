"""Host-side CUDA: an extern "C" function taking host pointers; it allocates device memory, copies, launches
and copies back itself, so its time includes the transfers (no device roofline applies)."""

from grader.kinds import Kind

KIND = Kind(
    "cuda_host",
    lang="cuda",
    entry='an extern "C" function taking host pointers; it allocates, copies and launches itself',
    suffixes=(".cu",),
    loader="grader.child.loading:load_shared_library",
    builder="grader.run.grade:build_raw_cuda",
    nvcc=True,
    gpu_to_run=True,
    sanitizer_tools=("racecheck", "synccheck", "memcheck", "initcheck"),
    host_side=True,
)
