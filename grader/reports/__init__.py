"""What a learner or an instructor reads: the terminal's renderings, daily/weekly/final reports (jinja2),
the portfolio, progress, plots, the gradebook, the leaderboard and exports for CI systems.

Reports render records; they never re-grade. The top layer: it may import any package of the grader."""
