"""An agent whose sessions are long-tailed, as real coding sessions are: most end after a call or two, a few
run many times longer. The workload of `polar learn mode=async` and `polar bench async`.

    python3 long_tail_agent.py [--tail 8] [--tool-s 0.5] [--crash P] [--hang P]

Each session draws its length L from a Pareto distribution (shape 1.2, heavy-tailed), capped at `--tail`: it
makes floor(L) model calls, one conversation growing turn by turn, and between two calls spends `--tool-s`
seconds "running a tool" (the model is idle meanwhile, as it is while an agent runs tests). More than half make
one call; about one in `tail`^1.2 makes `tail`. Its last answer goes to answer.txt (the `answer`
evaluator's file): the reward is learned from the last call, the earlier ones train with it.

Faults, for tests: `--crash P` exits 1 after its first call with probability P; `--hang P` then sleeps far past
any agent timeout with probability P. Standard library only (its calls: `chat.py`).
"""

import argparse
import os
import random
import sys
import time

from chat import ask

parser = argparse.ArgumentParser()
parser.add_argument("--tail", type=float, default=8.0, help="the longest session's calls: the tail's cap")
parser.add_argument("--tool-s", type=float, default=0.5, help="seconds between two calls")
parser.add_argument("--crash", type=float, default=0.0)
parser.add_argument("--hang", type=float, default=0.0)
args = parser.parse_args()

rng = random.Random()  # each session its own draw
calls = int(min(args.tail, rng.paretovariate(1.2)))  # >= 1

messages = [{"role": "user", "content": os.environ["POLAR_TASK"]}]
for turn in range(calls):
    answer = ask(messages)
    print(answer, flush=True)
    if turn == 0 and rng.random() < args.crash:
        sys.exit(1)
    if turn == 0 and rng.random() < args.hang:
        time.sleep(3600)
    if turn + 1 < calls:
        time.sleep(args.tool_s)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Again."}]
with open("answer.txt", "w") as f:
    f.write(answer)
