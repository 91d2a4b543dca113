"""What runs beside learner code: the grading child (`python -m grader.child.worker`) and its jobs, the
loaders of learner code, the timing harness, and the OS box the child puts itself in.

Everything here may run with learner code in the same process, so nothing here is trusted to decide a
verdict: the child measures, the parent (`grader.run`) judges. It may import `grader.core`,
`grader.toolchain`, `grader.cuda_cpu` and `grader.checks`; never `grader.run` or anything above it."""
