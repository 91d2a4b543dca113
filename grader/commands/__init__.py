"""The `kcourse` verbs beyond a single grade: grade-batch (and its Dask cluster), validate, compare, watch,
profile, tune and viz, env-check, list, release. `grader.cli` registers them.

The top layer: it may import any package of the grader."""
