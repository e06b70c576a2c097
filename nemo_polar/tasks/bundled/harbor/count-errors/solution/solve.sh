#!/bin/bash
# The level is the second field; compare it case-insensitively.
awk 'toupper($2) == "ERROR" { n++ } END { print n + 0 }' server.log > count.txt
