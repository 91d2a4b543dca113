"""Turning a learner's files into something that can run: nvcc through ninja, torch operator builds,
ThunderKittens, notebooks to .py, and what the compilers say (errors, occupancy, Triton's lint).

Runs in the trusted grader: it compiles learner code but never runs it. It may import `grader.core`."""
