#!/bin/bash
# 1 when count.txt holds exactly the number of ERROR entries (4), else 0.
if [ "$(cat count.txt 2>/dev/null)" = "4" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "count.txt: $(cat count.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
