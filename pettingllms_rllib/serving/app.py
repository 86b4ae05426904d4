"""The Ray Serve application: HTTP routes over :class:`~.team.TeamService`, with batching.

Routes (JSON in, JSON out; every refusal is a 4xx whose body names the field, ``requests.py``):

* ``POST /v1/episodes``: play one task instance with the whole team; the transcript back.
* ``POST /v1/chat/completions``: one trained agent answers a chat (OpenAI-compatible; ``model``
  is an agent id or ``<base>:<agent>``, as ``ray.serve.llm`` names LoRA adapters).
* ``GET /v1/models``: the names ``model`` accepts.

Concurrent requests are gathered into batches (``gather.py``: every request that arrived while
the previous batch ran, up to ``max_batch_size``, waiting up to ``batch_wait_timeout_s`` for
more) and each batch runs in a worker thread, so the replica's event loop keeps accepting
requests while the model computes.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route methods' annotations
# (``request: Request``) at run time, through Serve's ingress wrapper.
import asyncio
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from pettingllms_rllib.serving.gather import BatchGatherer
from pettingllms_rllib.serving.requests import (RequestError, decode_json, parse_chat_request,
                                                parse_episode_request)

logger = logging.getLogger(__name__)

api = FastAPI(title="pettingllms-rllib team server")


@serve.deployment(max_ongoing_requests=128)
@serve.ingress(api)
class TeamServer:
    """One replica: the checkpoint's modules loaded once, requests batched onto them.

    Args:
        checkpoint: an AT-GRPO checkpoint folder (resolved by :func:`build_app`).
        max_batch_size: most requests of one kind gathered into one batch.
        batch_wait_timeout_s: how long the first request of a batch waits for others.
        imports: modules that register the user's envs (imported before the checkpoint loads).
        engine: what generates, ``hf`` or ``vllm`` (``engines/checkpoint_engine.py``).
    """

    def __init__(self, checkpoint: str, max_batch_size: int, batch_wait_timeout_s: float,
                 imports: list[str], engine: str):
        from pettingllms_rllib.experiment import import_env_modules
        from pettingllms_rllib.serving.team import TeamService

        import_env_modules(imports, source="serve")
        self.service = TeamService.from_checkpoint(checkpoint, engine=engine)
        self._episodes = BatchGatherer(self.service.play, max_batch_size, batch_wait_timeout_s)
        self._chats = BatchGatherer(self.service.complete, max_batch_size, batch_wait_timeout_s)

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return self.service.models()

    @api.post("/v1/episodes")
    async def episodes(self, request: Request) -> JSONResponse:
        try:
            parsed = parse_episode_request(decode_json(await request.body()),
                                           self.service.team)
            prepared = await asyncio.to_thread(self.service.prepare_episode, parsed)
        except RequestError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        try:
            result = await self._episodes.submit(prepared)
        except Exception as exc:  # a bug below the env (the env's own errors are caught)
            return _server_error(exc)
        return JSONResponse(result, status_code=result.get("error", {}).get("code", 200))

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> JSONResponse:
        try:
            parsed = parse_chat_request(decode_json(await request.body()), self.service.team)
            prepared = self.service.prepare_chat(parsed)
        except RequestError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        try:
            return JSONResponse(await self._chats.submit(prepared))
        except Exception as exc:
            return _server_error(exc)


def _server_error(exc: Exception) -> JSONResponse:
    """A 500 in the API's error shape; the traceback goes to the replica's log."""
    logger.exception("request failed")
    return JSONResponse({"error": {"message": f"{type(exc).__name__}: {exc}",
                                   "type": "server_error", "param": None, "code": 500}},
                        status_code=500)


def build_app(checkpoint: Union[str, Path], *, num_replicas: int = 1, max_batch_size: int = 16,
              batch_wait_timeout_s: float = 0.01, num_cpus_per_replica: float = 1.0,
              num_gpus_per_replica: float = 0.0, imports: Sequence[str] = (),
              engine: str = "hf") -> serve.Application:
    """The Serve application for one trained team: ``serve.run(build_app(ckpt))``.

    Args:
        checkpoint: a checkpoint folder, a trial folder or a one-trial experiment folder (its
            newest checkpoint is served). Anything else fails here, before Serve starts.
        num_replicas: replicas, each with its own copy of every module.
        max_batch_size: most concurrent requests of one kind served by one batch.
        batch_wait_timeout_s: how long a batch waits to fill up.
        num_cpus_per_replica / num_gpus_per_replica: each replica's Ray resources.
        imports: modules that register the user's envs with ``register_text_env`` (as an
            experiment's ``imports:``); replicas import them too, so they must be on the
            replicas' Python path.
        engine: what generates: ``hf`` (the checkpoint's torch modules; what ``eval`` uses)
            or ``vllm`` (vLLM loads the same weights: one adapter per LoRA module, or one
            engine per full model; give each replica a GPU).
    """
    from pettingllms_rllib import checkpoints
    from pettingllms_rllib.engines import CHECKPOINT_ENGINES, engine_kind
    from pettingllms_rllib.envs.registry import make_text_env
    from pettingllms_rllib.experiment import import_env_modules

    if engine not in CHECKPOINT_ENGINES:
        raise ValueError(f"unknown serving engine {engine!r}; known: {list(CHECKPOINT_ENGINES)}")
    # Its package not installed (vLLM): the install hint now, not a dead replica later.
    engine_kind(engine).require()
    if num_replicas < 1 or max_batch_size < 1 or batch_wait_timeout_s < 0:
        raise ValueError(f"num_replicas and max_batch_size must be >= 1 and "
                         f"batch_wait_timeout_s >= 0; got {num_replicas}, {max_batch_size}, "
                         f"{batch_wait_timeout_s}")
    resolved = checkpoints.resolve(checkpoint).resolve()
    config = checkpoints.read_config(resolved)
    checkpoints.module_dirs(resolved)
    import_env_modules(list(imports), source="serve")
    try:  # the trained task must be known here: replicas look it up by id
        make_text_env(config["env"], config["env_config"])
    except KeyError as exc:
        raise ValueError(f"{resolved} was trained on env {config['env']!r}, which is not "
                         f"registered here ({exc.args[0]}); pass the module that registers "
                         "it with imports (--import on the command line)") from exc
    return TeamServer.options(
        num_replicas=num_replicas,
        ray_actor_options={"num_cpus": num_cpus_per_replica, "num_gpus": num_gpus_per_replica},
    ).bind(str(resolved), max_batch_size, batch_wait_timeout_s, list(imports), engine)


def app_builder(args: Mapping[str, Any]) -> serve.Application:
    """For Serve config files (``serve run`` / ``serve deploy``): ``import_path:
    pettingllms_rllib.serving.app:app_builder`` with ``args: {checkpoint: ..., ...}`` taking
    :func:`build_app`'s keyword arguments."""
    args = dict(args)
    if "checkpoint" not in args:
        raise ValueError("app_builder needs args.checkpoint (a checkpoint, trial or "
                         "experiment folder)")
    return build_app(args.pop("checkpoint"), **args)
