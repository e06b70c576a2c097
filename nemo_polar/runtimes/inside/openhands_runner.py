"""Runs one OpenHands SDK agent on one task, in a local workspace (no docker, no agent server).

Run by the toolchain's Python 3.12 (tools/openhands/bin/python3), not by nemo_polar's own, so
it imports nothing from nemo_polar. The key comes from POLAR_API_KEY (not argv, which `ps` shows):

    python openhands_runner.py --base-url URL/v1 --model M --workdir DIR --max-steps N \
        [--persist DIR] TASK

Exit status: 0 when the agent finished, 2 when it ran out of steps, 1 on any other error or a stuck
agent. Nothing is interactive; the only network use is the model API at --base-url.
"""

from __future__ import annotations

import argparse
import os
import sys

FINISHED, OUT_OF_STEPS, FAILED = 0, 2, 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True, help="the OpenAI-compatible API, ending in /v1")
    p.add_argument("--model", required=True, help="the served model's name")
    p.add_argument("--workdir", required=True)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--persist", help="where the conversation's events are written")
    p.add_argument("task")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from openhands.sdk import LLM, Agent, Conversation, Tool
    from openhands.sdk.conversation.state import ConversationExecutionStatus
    from openhands.sdk.event.conversation_error import ConversationErrorEvent
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.terminal import TerminalTool
    from pydantic import SecretStr

    llm = LLM(
        model=f"openai/{args.model}",  # litellm's generic OpenAI-compatible route
        base_url=args.base_url,
        api_key=SecretStr(os.environ["POLAR_API_KEY"]),
        usage_id="agent",
        num_retries=2,  # the proxy is local: a failure will not heal in a minute of back-off
        retry_min_wait=1,
        retry_max_wait=4,
    )
    tools = [Tool(name=TerminalTool.name, params={"terminal_type": "subprocess"}), Tool(name=FileEditorTool.name)]
    agent = Agent(llm=llm, tools=tools)  # finish and think come with every agent
    conversation = Conversation(
        agent=agent,
        workspace=args.workdir,
        persistence_dir=args.persist,
        max_iteration_per_run=args.max_steps,
        delete_on_close=False,
    )
    try:
        conversation.send_message(args.task)
        conversation.run()
    except Exception as exc:  # ConversationRunError and friends: the event log has the details
        print(f"openhands: {type(exc).__name__}: {exc}", file=sys.stderr)
        return FAILED
    finally:
        conversation.close()
    state = conversation.state
    if state.execution_status == ConversationExecutionStatus.FINISHED:
        return FINISHED
    errors = [e for e in state.events if isinstance(e, ConversationErrorEvent)]
    for e in errors:
        print(f"openhands: {e.code}: {e.detail}", file=sys.stderr)
    if errors and errors[-1].code == "MaxIterationsReached":
        return OUT_OF_STEPS
    print(f"openhands: the run ended {state.execution_status.value}", file=sys.stderr)
    return FAILED


if __name__ == "__main__":
    sys.exit(main())
