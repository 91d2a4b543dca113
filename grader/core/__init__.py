"""The grader's vocabulary and data, shared by every process: specs, plans, records, the results store, paths.

Trusted, and safe to import anywhere (the grading child imports it too). It imports nothing of the grader's
outside `grader.core`, and nothing here starts a process, compiles or runs learner code."""
