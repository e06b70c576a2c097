"""The smallest agent for the `shell` harness: one Chat Completions call with the standard library.

    polar up "harnesses=[{name: shell, command: 'python3 /abs/path/examples/one_call_agent.py'}]"

The gateway gives it the proxy and its session key in the OpenAI SDK's variables and the task in
POLAR_TASK; any script or SDK that reads those talks to the proxy unchanged. It prints the answer and
writes it to answer.txt in its working copy (what the `answer` evaluator reads).
"""

import json
import os
import urllib.request

body = {
    "model": os.environ["POLAR_MODEL"],
    "messages": [{"role": "user", "content": os.environ["POLAR_TASK"]}],
    "max_tokens": 32,
}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    json.dumps(body).encode(),
    {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
with urllib.request.urlopen(request) as response:
    answer = json.load(response)["choices"][0]["message"]["content"] or ""
print(answer)
with open("answer.txt", "w") as f:
    f.write(answer)
