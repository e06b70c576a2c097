#!/bin/bash
# The checks write /logs/verifier/reward.json: {"reward": 1 only when every check passes, "passed", "total"}.
python3 /tests/test_median.py
