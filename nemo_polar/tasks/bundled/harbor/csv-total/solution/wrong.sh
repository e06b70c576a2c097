#!/bin/bash
# Not part of the Harbor format: `polar tasks check` runs it as a plausible wrong solution, which must
# score 0. It splits on commas, so quoted names with commas shift the columns and those orders are lost.
awk -F, 'NR > 1 && $3 == "paid" { t += $4 * $5 } END { printf "%.2f\n", t }' orders.csv > total.txt
