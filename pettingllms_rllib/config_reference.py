"""The reference page of every config knob (docs/config.md), generated from the code.

Each section of an experiment file's ``algorithm:`` mapping (``experiment.SECTIONS``) is one
call of an ``ATGRPOConfig`` setter; the page has one table per section with, for each key:

* its type and accepted values: the declared :class:`~pettingllms_rllib.algorithms.
  config_fields.Field` (choices, bounds, optional), or the one read from its default's type
  (:func:`~pettingllms_rllib.algorithms.config_fields.field_for`), else the setter's
  annotation;
* its default: the value on a fresh ``ATGRPOConfig()``;
* what it does: the knob's doc (``config_fields.KNOBS``), else the parameter's entry in
  RLlib's setter's ``Args:`` docstring section, or "(undocumented)".

The rows of a section are its declared fields (``config_fields.FIELDS``), every named
parameter of the setters this library defines (``llm``, ``training``, ``resource_pools``), the
RLlib keys whose default ``ATGRPOConfig`` changes, and :data:`EXTRA_RLLIB_KEYS`. Two nested
tables follow: ``llm.lora`` and ``environment.env_config.sandbox_limits``.

Regenerate the page with::

    python -m pettingllms_rllib.config_reference > docs/config.md

``tests/test_config_reference.py`` fails when the page and the code disagree.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from typing import Any

__all__ = ["EXTRA_RLLIB_KEYS", "REGENERATE", "docstring_args", "reference_rows",
           "render_config_reference", "setter_parameters"]

#: The command that writes docs/config.md.
REGENERATE = "python -m pettingllms_rllib.config_reference > docs/config.md"
#: RLlib keys listed although this library neither declares a field for them nor changes
#: their default: shipped experiment files set them.
EXTRA_RLLIB_KEYS: dict[str, tuple[str, ...]] = {
    "resources": ("num_cpus_for_main_process",),
    "learners": ("num_cpus_per_learner",),
}
UNDOCUMENTED = "(undocumented)"
_ENTRY = re.compile(r"^(\*{0,2}\w+)(?:\s*\([^)]*\))?:(?:\s+(.*))?$")


def docstring_args(doc: str | None, heading: str = "Args:") -> dict[str, str]:
    """The entries of a Google-style docstring section (``Args:`` by default): name -> its
    text joined to one line (``**kwargs`` keeps its stars)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading) + 1
    except StopIteration:
        return {}
    entries: dict[str, list[str]] = {}
    indent = None
    current = None
    for line in lines[start:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        match = _ENTRY.match(line.strip()) if depth == indent else None
        if match:
            current = match.group(1)
            entries[current] = [match.group(2) or ""]
        elif current is not None:
            entries[current].append(line.strip())
    return {name: " ".join(part for part in parts if part) for name, parts in entries.items()}


def setter_parameters(method) -> list[str]:
    """The keyword names a setter takes (not ``self``, not ``**kwargs``), in order."""
    return [name for name, p in inspect.signature(method).parameters.items()
            if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def _own_setter(section: str) -> bool:
    from pettingllms_rllib.algorithms.config import ATGRPOConfig

    return section in vars(ATGRPOConfig)


def _changed_rllib_defaults(section: str) -> list[str]:
    """Parameters of RLlib's setter whose attribute ``ATGRPOConfig`` sets to another default."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from pettingllms_rllib.algorithms.config import ATGRPOConfig

    ours, theirs = vars(ATGRPOConfig()), vars(AlgorithmConfig())
    changed = []
    for name in setter_parameters(getattr(AlgorithmConfig, section)):
        if name in ours and name in theirs:
            try:
                same = bool(ours[name] == theirs[name]) and type(ours[name]) is type(theirs[name])
            except Exception:
                same = False
            if not same:
                changed.append(name)
    return changed


def reference_rows(section: str) -> list[str]:
    """The keys listed for one section, in the setter's parameter order (then RLlib's)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from pettingllms_rllib.algorithms.config import ATGRPOConfig
    from pettingllms_rllib.algorithms.config_fields import FIELDS

    keys = set(FIELDS.get(section, {})) | set(EXTRA_RLLIB_KEYS.get(section, ()))
    if _own_setter(section):
        keys |= set(setter_parameters(getattr(ATGRPOConfig, section)))
    if hasattr(AlgorithmConfig, section):
        keys |= set(_changed_rllib_defaults(section))
    order = setter_parameters(getattr(ATGRPOConfig, section))
    if section == "training":  # then the RLlib keys it passes on
        order += [n for n in setter_parameters(AlgorithmConfig.training) if n not in order]
    return sorted(keys, key=lambda key: (order.index(key) if key in order else len(order), key))


def _annotation(section: str, key: str) -> str | None:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from pettingllms_rllib.algorithms.config import ATGRPOConfig

    for owner in (ATGRPOConfig, AlgorithmConfig):
        method = getattr(owner, section, None)
        if method is None:
            continue
        parameter = inspect.signature(method).parameters.get(key)
        if parameter is not None and parameter.annotation is not inspect.Parameter.empty:
            annotation = parameter.annotation
            return annotation if isinstance(annotation, str) else inspect.formatannotation(
                annotation)
    return None


def _accepted(section: str, key: str) -> str:
    from pettingllms_rllib.algorithms.config_fields import field_for

    field = field_for(section, key)
    if field is not None:
        return _describe(field)
    annotation = _annotation(section, key)
    return f"`{annotation}` (annotation; no declared field)" if annotation else "no declared field"


def _describe(field) -> str:
    return field.describe(f"<= {field.bound.what}" if field.bound is not None else None)


def _doc(section: str, key: str) -> str:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from pettingllms_rllib.algorithms.config_fields import section_knobs

    own = {knob.key: knob.doc for knob in section_knobs(section)}
    if key in own:
        return own[key]
    if not _own_setter(section):  # RLlib's setter, inherited: its own docstring
        inherited = docstring_args(inspect.getdoc(getattr(AlgorithmConfig, section)))
        return inherited.get(key, UNDOCUMENTED)
    if hasattr(AlgorithmConfig, section):
        rllib = docstring_args(inspect.getdoc(getattr(AlgorithmConfig, section)))
        if key in rllib:
            return f"RLlib's `AlgorithmConfig.{section}`: {rllib[key]}"
    return UNDOCUMENTED


def _default_text(value: Any) -> str:
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _default(section: str, key: str, defaults: dict[str, Any]) -> str:
    from pettingllms_rllib.algorithms.config_fields import attribute_of

    attribute = attribute_of(section, key)
    if attribute not in defaults:
        return "(no attribute)"
    text = _code(_default_text(defaults[attribute]))
    return f"{text} (as `{attribute}`)" if attribute != key else text


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["| key | type and accepted values | default | what it does |", "|---|---|---|---|"]
    out += [f"| {_code(k)} | {_cell(t)} | {_cell(d)} | {_cell(w)} |" for k, t, d, w in rows]
    return out


def _lora_rows() -> list[tuple[str, str, str, str]]:
    from pettingllms_rllib.algorithms.config_fields import LORA_FIELDS
    from pettingllms_rllib.models.memory import DEFAULT_LORA

    return [(key, _describe(field), _code(_default_text(DEFAULT_LORA.get(key))),
             "peft `LoraConfig` argument")
            for key, field in LORA_FIELDS.items()]


def _sandbox_rows() -> list[tuple[str, str, str, str]]:
    from pettingllms_envs.sandbox import SandboxLimits
    from pettingllms_rllib.algorithms.config_fields import SANDBOX_LIMIT_FIELDS

    docs = docstring_args(SandboxLimits.__doc__, "Attributes:")
    rows = []
    for f in dataclasses.fields(SandboxLimits):
        declared = SANDBOX_LIMIT_FIELDS.get(f.name)
        accepted = (_describe(declared) if declared is not None
                    else f"`{f.type}` (checked by `SandboxLimits` itself)")
        rows.append((f.name, accepted, _code(_default_text(f.default)),
                     docs.get(f.name, UNDOCUMENTED)))
    return rows


def render_config_reference() -> str:
    """The Markdown of docs/config.md."""
    from pettingllms_rllib.algorithms.config import ATGRPOConfig
    from pettingllms_rllib.experiment import SECTIONS, TOP_LEVEL_KEYS

    defaults = dict(vars(ATGRPOConfig()))
    out = [
        "# Config reference",
        "",
        "<!-- Generated by `" + REGENERATE + "`; do not edit by hand.",
        "     tests/test_config_reference.py fails when this page and the code disagree. -->",
        "",
        "Every knob of `ATGRPOConfig`, generated from the code. This library's own knobs",
        "(`.llm`, `.training`, `.resource_pools`) are each declared once, in `KNOBS` of",
        "[config_fields.py](../pettingllms_rllib/algorithms/config_fields.py): key, default,",
        "accepted values (checked before Ray starts) and text, from which the setters' keywords",
        "and `Args:` come too. RLlib's keys show RLlib's texts and a fresh `ATGRPOConfig()`'s",
        "defaults. Regenerate it with",
        "",
        "```bash",
        REGENERATE,
        "```",
        "",
        "An experiment file (`pettingllms-rllib train FILE.yaml`) has the top-level keys "
        + ", ".join(f"`{k}`" for k in TOP_LEVEL_KEYS) + ". Its `algorithm:` mapping holds one "
        "section per setter below, `section: {key: value}`, the same as "
        "`ATGRPOConfig().section(key=value)` in Python and `--set section.key=value` on the "
        "command line. A section takes every keyword argument of its setter (RLlib's own "
        "setters take many more than are listed here: RLlib's `AlgorithmConfig` docs); the "
        "tables list the keys this library declares, defines, or changes the default of.",
        "",
        "`extends: <path>` builds a file on another one (deep-merged); `arms:` names the arms "
        "compared in a setting (each a partial experiment, `train FILE --arm NAME`) and "
        "`every_arm:` what they share; the rules are in `pettingllms_rllib/experiment.py`'s "
        "docstring.",
        "",
        "A key with \"no declared field\" has neither a declared type or range nor a number or "
        "flag default, so the experiment file's check does not look at its value (`validate()` "
        "may still refuse it). A default shown \"as `attr`\" is stored under that attribute.",
    ]
    for section in SECTIONS:
        keys = reference_rows(section)
        out += ["", f"## `{section}`", ""]
        out.append(f"`ATGRPOConfig().{section}(...)`" + (
            "." if _own_setter(section) else
            f": RLlib's setter; the texts are the `Args:` of RLlib's `AlgorithmConfig.{section}`."))
        if not keys:
            out += ["", "No key declared or changed here: every keyword of RLlib's "
                        f"`AlgorithmConfig.{section}` with RLlib's default."]
            continue
        out.append("")
        out += _table([(key, _accepted(section, key), _default(section, key, defaults),
                        _doc(section, key)) for key in keys])
        if section == "llm":
            out += ["", "### `llm.lora`", "",
                    "peft `LoraConfig` keyword arguments; the keys whose range is checked, with "
                    "the defaults used for keys left out:", ""]
            out += _table(_lora_rows())
        if section == "environment":
            out += ["", "### `environment.env_config.sandbox_limits`", "",
                    "Of every task that runs programs (`SandboxLimits`, "
                    "[sandbox.md](sandbox.md)):", ""]
            out += _table(_sandbox_rows())
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_config_reference())
