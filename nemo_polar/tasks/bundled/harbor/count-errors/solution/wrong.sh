#!/bin/bash
# Not part of the Harbor format: `polar tasks check` runs it as a plausible wrong solution, which must
# score 0. It counts every line that mentions ERROR, in capitals only.
grep -c ERROR server.log > count.txt
