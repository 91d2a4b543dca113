"""`python -m grader`: the same command line as `kcourse`."""

from grader.cli import run

run()
