"""The trusted parent's side of one grade: the pipeline (build -> child -> checks -> record), the judge that
feeds the child trials and decides every verdict, the sandboxed child's process, compute-sanitizer runs,
heavy references on the GPU, and the kit's checksums.

It starts learner code only inside the box (`grader.child`). It may import every package below it
(`core`, `toolchain`, `cuda_cpu`, `checks`, `child`), never `grader.commands` or `grader.reports`."""
