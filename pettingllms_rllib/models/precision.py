"""Which arithmetic a model computes in: ``model_dtype: auto`` resolved per device.

Why "auto" is the default: bf16 matmuls are several times faster than fp32 on CPUs with AMX or
AVX512-BF16 and on CUDA GPUs with bf16 support, and several times *slower* on CPUs without
them (emulated). So the choice depends on the processor, not on the model, and is made by
reading what the device reports (``/proc/cpuinfo``'s flags, ``torch.cuda.is_bf16_supported``)
rather than assumed (bench/RESULTS.md, "Arithmetic").

What "auto" changes, and what it keeps (docs/design.md, "Precision"):

- generation (the env runners' engines) and a LoRA run's frozen base compute in bf16 where it
  is fast;
- what is trained stays fp32: LoRA adapters (PEFT keeps them fp32 on a bf16 base) and their
  optimizer states; under full fine-tuning the learner keeps fp32 master weights and computes
  its forward under ``torch.autocast`` in bf16;
- the behaviour log-probs then come from another numeric path than the learner's, so the
  learner recomputes the PPO ratio's denominator itself (``algorithms/learner.py``).

A forced ``float32`` or ``bfloat16`` is used as given, everywhere (``bfloat16`` then also holds
full fine-tuning's weights in bf16, as before ``auto`` existed).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

#: What ``model_dtype`` accepts.
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
#: CPU flags (as ``/proc/cpuinfo`` spells them) that make bf16 matmuls fast: Intel AMX tiles,
#: or AVX-512 BF16 dot products (AMD Zen 4 and later, Intel Cooper Lake and later).
FAST_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclasses.dataclass(frozen=True)
class DtypeChoice:
    """The dtype a model computes in on one device, and why (logged and recorded per run)."""

    requested: str
    dtype: str
    device: str
    reason: str

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def exact(self) -> bool:
        """Whether it computes in fp32 (the path whose log-probs match a recompute)."""
        return self.dtype == "float32"

    def describe(self) -> str:
        return f"model_dtype={self.requested}: {self.dtype} on {self.device} ({self.reason})"


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none: macOS,
    Windows, a restricted container; the choice then falls back to fp32)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.lru_cache(maxsize=None)
def _this_cpus_flags() -> frozenset[str]:
    return cpu_flags()


def resolve_model_dtype(requested: str, device: str | None = None, *,
                        flags: frozenset[str] | None = None,
                        cuda_bf16: bool | None = None) -> DtypeChoice:
    """The dtype ``requested`` means on ``device`` ("cpu" or "cuda"; default: "cuda" where
    torch sees a GPU). ``flags`` and ``cuda_bf16`` replace what the machine reports (tests)."""
    if requested not in MODEL_DTYPES:
        raise ValueError(f"model_dtype={requested!r} is not accepted; accepted: "
                         f"{list(MODEL_DTYPES)}")
    if device is None or (device == "cuda" and cuda_bf16 is None):
        import torch  # here, so that config checks can resolve a choice without torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cuda" and cuda_bf16 is None:
            cuda_bf16 = torch.cuda.is_bf16_supported()
    if requested != "auto":
        return DtypeChoice(requested, requested, device, "chosen in the config")
    if device == "cuda":
        fast = cuda_bf16
        return (DtypeChoice(requested, "bfloat16", device, "the GPU supports bf16") if fast else
                DtypeChoice(requested, "float32", device, "the GPU has no bf16 support"))
    flags = _this_cpus_flags() if flags is None else flags
    found = [flag for flag in FAST_BF16_CPU_FLAGS if flag in flags]
    if found:
        return DtypeChoice(requested, "bfloat16", device,
                           f"the CPU reports {' and '.join(found)}")
    return DtypeChoice(requested, "float32", device,
                       f"the CPU reports none of {list(FAST_BF16_CPU_FLAGS)}: bf16 would be "
                       "emulated, slower than fp32")


def learner_dtypes(choice: DtypeChoice, *, trains_all_weights: bool) -> tuple[str, str | None]:
    """``(weights dtype, autocast dtype or None)`` of a model copy that trains all its weights
    (full fine-tuning's learner). Under ``auto`` with bf16 chosen, the weights stay fp32 (the
    master copy the optimizer updates) and the forward computes in bf16 under autocast; any
    other copy (a runner's, a LoRA base, a forced dtype) holds the chosen dtype itself."""
    if trains_all_weights and choice.requested == "auto" and not choice.exact:
        return "float32", choice.dtype
    return choice.dtype, None
