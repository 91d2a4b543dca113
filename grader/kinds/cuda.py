"""Raw CUDA: an extern "C" host function taking device pointers, compiled by the kit with nvcc into a shared
library and called through ctypes. Without a GPU it runs on the CPU emulator where the file allows it
(grader/cuda_cpu), and is compiled only elsewhere."""

from grader.kinds import Kind

KIND = Kind(
    "cuda",
    lang="cuda",
    entry='an extern "C" host function taking device pointers, called through ctypes',
    suffixes=(".cu",),
    loader="grader.child.loading:load_shared_library",
    builder="grader.run.grade:build_raw_cuda",
    nvcc=True,
    gpu_to_run=True,
    sanitizer_tools=("racecheck", "synccheck", "memcheck", "initcheck"),
)
