"""The checks of a grade: numerics, integrity, peak memory, speed, custom-op checks, and the hints shown
under a failing one. Each check measures in the grading child and is judged in the trusted parent.

Imported on both sides of the box, so it must not import the parent's process code: it may import
`grader.core`, `grader.toolchain` and `grader.cuda_cpu`."""
