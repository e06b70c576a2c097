"""An agent whose session is two chains, for the `shell` harness: it drafts an answer, then compacts, as opencode
and Claude Code do when a history grows long, starting over from a summary of its draft, and answers again.

    polar learn harness.command='python3 compacting_agent.py'

The second call's prompt does not extend the first's, so the trace builder starts a chain there; the answer the
`answer` evaluator reads (answer.txt) is the second one's, sampled after the split. Trained on the first chain
alone (NeMo-RL's Gym path at the commit we target), the reward is credited to the draft, which does not earn it.
"""

import os

from chat import ask

task = os.environ["POLAR_TASK"]
draft = ask([{"role": "user", "content": task}])
summary = f"Summary of the session so far: a draft of {len(draft.split())} words was written."
answer = ask([{"role": "system", "content": summary}, {"role": "user", "content": task}])
print(answer)
with open("answer.txt", "w") as f:
    f.write(answer)
