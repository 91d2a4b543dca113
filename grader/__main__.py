from grader.cli import run

run()
