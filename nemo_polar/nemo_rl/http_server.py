"""NeMo-RL's own vLLM HTTP server, run on this machine: the script `nemo_rl/server.py` starts in NeMo-RL's vLLM
environment (`scripts/setup.sh nemo_rl_vllm`), with the checkout NEMO_RL_DIR names on its path.

On a cluster NeMo-RL's generation worker (a Ray actor) builds the server every harness call reaches:
`VllmAsyncGenerationWorkerImpl._setup_vllm_openai_api_server` adds its routes to a FastAPI app, over the worker's
`AsyncLLM`. Here that method runs unchanged, handed an object carrying only what it reads (`cfg`, `llm`,
`llm_async_engine_args`, `_return_routed_experts_enabled`); no Ray, no GPU. The app also gets what our own
launcher needs of any server, beside NeMo-RL's routes: `/health`, and vLLM's dev-mode weight routes
(`/collective_rpc` for `reload_weights`, `/reset_prefix_cache`), which stand in for NeMo-RL's refit on a
cluster. It lists no models (`/v1/models`), as NeMo-RL's does not.

Standard library, vLLM and NeMo-RL only: it runs in their environment, not ours.
"""

import argparse
import asyncio
import json
import os
import sys


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--max-logprobs", type=int, default=20)
    p.add_argument("--tool-call-parser", default="hermes")
    p.add_argument("--sampling", default="{}", help="JSON: temperature, top_p, val_temperature, val_top_p")
    return p.parse_args()


def _generation_cfg(args: argparse.Namespace) -> dict:
    """NeMo-RL's `policy.generation` section, as much of it as the server reads: the (temperature, top_p) pairs
    every request is checked against, and the vLLM section's serving options."""
    sampling = {"temperature": 1.0, "top_p": 1.0} | json.loads(args.sampling)
    sampling.setdefault("val_temperature", sampling["temperature"])
    sampling.setdefault("val_top_p", sampling["top_p"])
    return sampling | {
        "model_name": args.model,
        "vllm_cfg": {
            "max_model_len": args.max_model_len,
            "http_server_serving_chat_kwargs": {"enable_auto_tools": True, "tool_parser": args.tool_call_parser},
        },
        "vllm_kwargs": {},
    }


class _Worker:
    """What `_setup_vllm_openai_api_server` reads of its generation worker."""

    def __init__(self, cfg: dict, llm, engine_args):
        self.cfg, self.llm, self.llm_async_engine_args = cfg, llm, engine_args

    def _return_routed_experts_enabled(self) -> bool:
        return False  # a dense model


def _our_routes(app, llm) -> None:
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    @app.get("/health")
    async def health() -> Response:
        await llm.check_health()
        return Response(status_code=200)

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> JSONResponse:
        body = await request.json()
        results = await llm.collective_rpc(body["method"], args=tuple(body.get("args") or ()))
        return JSONResponse({"results": [repr(r) for r in results]})

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        await llm.reset_prefix_cache()
        return Response(status_code=200)


async def _serve(args: argparse.Namespace) -> None:
    import uvicorn
    from fastapi import FastAPI
    from nemo_rl.models.generation.vllm.vllm_worker_async import VllmAsyncGenerationWorkerImpl
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine_args = AsyncEngineArgs(
        model=args.model,
        served_model_name=[args.served_model_name],
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        max_logprobs=args.max_logprobs,
        enforce_eager=True,
        disable_log_stats=True,
    )
    llm = AsyncLLM.from_engine_args(engine_args)
    app = FastAPI()
    _our_routes(app, llm)
    worker = _Worker(_generation_cfg(args), llm, engine_args)
    app = VllmAsyncGenerationWorkerImpl._setup_vllm_openai_api_server(worker, app)  # NeMo-RL's, unchanged
    # NeMo-RL's own uvicorn settings (its `_setup_vllm_server`), on the port asked for
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, timeout_keep_alive=120))
    try:
        await server.serve()
    finally:
        llm.shutdown()


def main() -> None:
    args = _args()
    checkout = os.environ.get("NEMO_RL_DIR")
    if not checkout:
        sys.exit("NEMO_RL_DIR is not set: it names the NeMo-RL checkout whose server runs here")
    sys.path.insert(0, checkout)
    if sys.version_info < (3, 12):  # pydantic refuses typing.TypedDict before 3.12; NeMo-RL's types use it
        import typing

        import typing_extensions

        typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
    asyncio.run(_serve(args))


if __name__ == "__main__":  # vLLM's engine core starts by spawn: it imports this module again
    main()
