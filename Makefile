# The two commands the README promises, plus what they build on.
.PHONY: setup setup-run run test bench

setup:  # everything the tests need
	bash scripts/setup.sh

setup-run:  # only what the loop uses
	bash scripts/setup.sh run

run: setup-run
	.venv/bin/polar learn

test: setup
	.venv/bin/python -m pytest -q -n 2

bench: setup-run
	.venv/bin/polar bench proxy --json
	.venv/bin/polar bench long --json
