"""Known third-party noise, silenced where it is made (each process calls
:func:`silence_known_noise` once: the CLI, every trial and every env runner).

Only messages that say nothing to a user of this library are dropped, each named here:

* RLlib's "You are running ATGRPO on the new API stack!": ATGRPO only exists on that stack;
* RLlib's ``RLModule(config=[RLModuleConfig object])`` deprecation: RLlib's own ``RLModule``
  constructor builds that object for every module (ours are built the new way);
* transformers' ``is_gradient_checkpointing`` FutureWarning: peft reads the old property when
  it wraps a model (``peft_model.py``), not our code;
* Ray Train's "Checkpoint successfully created at: ..." after every save: the final summary
  names the checkpoints that were kept (Tune deletes the others);
* Tune's "Trainable.setup took N seconds ... consider reuse_actors=True": every trial loads
  its models in ``setup``, so it is slow by nature, and reusing actors would not load less.

The CLI also sets ``TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S=0`` (unless the
user set it): Tune warns when a trial checkpoints more often than every few seconds, which only
tiny-model runs do, and a checkpoint every iteration is what resuming needs.

Our own deprecated calls are fixed at the source instead (RLlib's metrics API without
``clear_on_reduce``; transformers' ``activation_checkpointing_enable``).
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["show_library_info", "silence_known_noise"]

#: (logger name, text that marks the message) pairs dropped by :func:`silence_known_noise`.
DROPPED_LOG_MESSAGES = (
    ("ray.rllib.algorithms.algorithm_config", "on the new API stack!"),
    ("ray._common.deprecation", "RLModule(config=[RLModuleConfig"),
    ("ray.tune.trainable.trainable", "Trainable.setup took"),
    ("ray.train._internal.storage", "Checkpoint successfully created at"),
)


class _DropContaining(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def silence_known_noise() -> None:
    """Install the filters (idempotent)."""
    for name, text in DROPPED_LOG_MESSAGES:
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropContaining) and f.text == text for f in target.filters):
            target.addFilter(_DropContaining(text))
    warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated",
                            category=FutureWarning)


def show_library_info() -> None:
    """In a Ray worker (a trial, an env runner), let this library's INFO lines through: Ray
    forwards the worker's stderr to the driver's terminal, but a worker's root logger stops at
    WARNING. Idempotent; a process that configured logging itself is left alone."""
    library = logging.getLogger("pettingllms_rllib")
    if library.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    library.propagate = False
