#!/bin/bash
# Not part of the Harbor format: `polar tasks check` runs it as a plausible wrong solution, which must
# score 0. It sorts in place (changing the caller's list) and ignores the even-length case.
sed -i 's/    return values\[len(values) \/\/ 2\]/    values.sort()\n    return values[len(values) \/\/ 2]/' stats/center.py
