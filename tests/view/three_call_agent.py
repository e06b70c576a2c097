"""A test agent for the shell harness: three Chat Completions calls with the standard library, so a
real session has a chain the builder continues and a sub-agent of its own.

    1. the task
    2. the task, the model's answer, "Go on." (continues call 1: the template re-renders the answer)
    3. a sub-agent: its own system prompt, asked about the answer (a second chain)
"""

import json
import os
import urllib.request


def chat(messages):
    body = {"model": os.environ["POLAR_MODEL"], "messages": messages, "max_tokens": 12}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)["choices"][0]["message"]["content"] or ""


task = [{"role": "user", "content": os.environ["POLAR_TASK"]}]
first = chat(task)
more = chat(task + [{"role": "assistant", "content": first}, {"role": "user", "content": "Go on."}])
check = chat([{"role": "system", "content": "You check answers."}, {"role": "user", "content": "Check: " + first}])
print(first, more, check)
