#!/bin/bash
# 2*19.99 + 1*250.00 + 4*7.25 + 10*1.50 = 333.98
if [ "$(cat total.txt 2>/dev/null)" = "333.98" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "total.txt: $(cat total.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
