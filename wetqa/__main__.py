from wetqa.cli import run

run()
