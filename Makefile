# The two commands the README promises, plus what they build on.
.PHONY: setup run test bench

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/polar learn

test: setup
	.venv/bin/python -m pytest -q

bench: setup
	.venv/bin/polar bench proxy --json
	.venv/bin/polar bench long --json
