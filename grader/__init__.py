"""kernel-course grader: discover -> build -> run (child process) -> check -> time -> record -> report."""

__version__ = "0.1.0"
