"""One Chat Completions call with the standard library, as the example agents make it: the gateway gives a
`shell` harness the proxy and its session key in the OpenAI SDK's variables and the model in POLAR_MODEL."""

import json
import os
import urllib.request


def ask(messages: list[dict], max_tokens: int = 32) -> str:
    """The model's answer to `messages` (empty when it only called tools)."""
    body = {"model": os.environ["POLAR_MODEL"], "messages": messages, "max_tokens": max_tokens}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)["choices"][0]["message"]["content"] or ""
