"""Bookkeeping of weight sync into an engine that serves weights outside the torch module (vLLM).

The learner trains torch modules; a vLLM engine serves its own copy of the weights. After every
update the runner pushes the new weights into the engine and the engine must
provably serve them before the next rollout. This module holds the parts of that which need
neither vLLM nor a GPU, so they are unit-tested everywhere:

* :class:`AdapterTable`: which vLLM LoRA id serves each module. Every new weights version gets a
  fresh, strictly larger id, because vLLM caches adapters by id (re-registering an id would keep
  serving the cached, stale weights); the replaced adapter is returned so the caller drops it.
* :func:`write_lora_adapter`: one adapter's state as a peft adapter folder, the format vLLM loads.
* :func:`check_engine_version`: the loud failure when an engine lags the learner.
* :func:`publish_full_weights` / :func:`read_full_weights`: full models handed from the learner to
  the runners through a directory both can read, instead of through Ray's object store
  (gigabytes per update for a 1.7B model).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch


class EngineWeightsLagError(RuntimeError):
    """An engine serves older weights than the learner synced to its runner."""


@dataclasses.dataclass(frozen=True)
class ServedAdapter:
    """One LoRA adapter loaded into the engine: a module's weights at one version."""

    module_id: str
    lora_int_id: int
    weights_version: int
    path: str

    @property
    def name(self) -> str:
        return f"{self.module_id}@v{self.weights_version}"


class AdapterTable:
    """The adapter that serves each module now, with ids that only ever increase."""

    def __init__(self):
        self._next_id = 1  # vLLM reserves 0 for "no adapter"
        self._served: dict[str, ServedAdapter] = {}

    def publish(self, module_id: str, weights_version: int,
                path: str) -> tuple[ServedAdapter, ServedAdapter | None]:
        """Register new weights of ``module_id``; return (the new adapter, the one it replaces).

        Raises ValueError when the version goes backwards: the runner must never serve older
        weights than it already served.
        """
        previous = self._served.get(module_id)
        if previous is not None and weights_version < previous.weights_version:
            raise ValueError(f"module {module_id!r}: weights version {weights_version} is older "
                             f"than the served version {previous.weights_version}")
        adapter = ServedAdapter(module_id=module_id, lora_int_id=self._next_id,
                                weights_version=int(weights_version), path=str(path))
        self._next_id += 1
        self._served[module_id] = adapter
        return adapter, previous

    def served(self, module_id: str) -> ServedAdapter:
        try:
            return self._served[module_id]
        except KeyError:
            raise KeyError(f"no adapter loaded for module {module_id!r}; loaded: "
                           f"{sorted(self._served)}") from None

    @property
    def module_ids(self) -> list[str]:
        return sorted(self._served)

    def __contains__(self, module_id: str) -> bool:
        return module_id in self._served


def write_lora_adapter(state: Mapping[str, Any], lora_kwargs: Mapping[str, Any],
                       folder: str | Path) -> Path:
    """Save one adapter (``get_peft_model_state_dict`` keys) as a peft adapter folder.

    Writes ``adapter_config.json`` from the same LoraConfig kwargs the learner's adapters were
    built with and ``adapter_model.safetensors``; vLLM's ``LoRARequest`` loads exactly this.
    """
    from peft import LoraConfig
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not state:
        raise ValueError("an adapter state with no tensors cannot be served")
    config = LoraConfig(**dict(lora_kwargs))
    config_dict = config.to_dict()
    config_dict["target_modules"] = sorted(config_dict["target_modules"] or [])
    (folder / "adapter_config.json").write_text(json.dumps(config_dict, indent=2, default=str))
    tensors = {key: torch.as_tensor(value).detach().cpu().contiguous()
               for key, value in state.items()}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return folder


def check_engine_version(engine_version: int, expected_version: int, *, where: str) -> None:
    """Fail loudly when the engine serves older weights than the runner received."""
    if engine_version < expected_version:
        raise EngineWeightsLagError(
            f"{where}: the engine serves weights version {engine_version} but the learner "
            f"synced version {expected_version}; refusing to sample with stale weights")


def full_weights_folder(root: str | Path, module_id: str, weights_version: int) -> Path:
    """Where :func:`publish_full_weights` puts one module's weights of one version."""
    return Path(root) / module_id / f"v{int(weights_version):08d}"


def publish_full_weights(causal_lm, root: str | Path, module_id: str,
                         weights_version: int) -> str:
    """Write a module's full model as safetensors under ``root`` and drop its older versions.

    Written into a temporary sibling and renamed into place, so a reader never sees half a
    checkpoint; older versions are removed only after the new one is complete (every runner
    finished loading the previous version before this update started).
    """
    from safetensors.torch import save_file

    target = full_weights_folder(root, module_id, weights_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        save_file(_every_tensor_by_name(causal_lm.state_dict()), str(tmp / "model.safetensors"))
        if target.exists():  # the same version published again (a retried update)
            shutil.rmtree(target)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in target.parent.iterdir():
        if old != target and old.name.startswith("v"):
            shutil.rmtree(old, ignore_errors=True)
    return str(target)


def _every_tensor_by_name(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every state-dict entry under its own name, tied ones included (as separate copies).

    ``save_pretrained`` would drop the tied ``lm_head.weight``; vLLM's CPU backend keeps its own
    (repacked) copy of it, so an update without it left that copy stale.
    """
    tensors, seen = {}, set()
    for name, value in state.items():
        tensor = value.detach().cpu()
        key = (tensor.data_ptr(), tuple(tensor.shape))
        tensors[name] = tensor.clone() if key in seen else tensor.contiguous()
        seen.add(key)
    return tensors


def read_full_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a published folder (memory-mapped safetensors, HF parameter names)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors weights in {folder}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
