"""``ATGRPOConfig``'s own setters, RLlib style: every argument is documented in the setter's
Args and sets the attribute of the same name (``model`` is stored as ``llm_model``: RLlib's
``model`` is its old-stack model dict); arguments left out change nothing.

Each knob is declared once (``config_fields.KNOBS``): the setters' keywords, their ``Args:``,
a fresh config's defaults and the page docs/config.md all come from that one entry."""

import inspect
import re

import pytest

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.config_fields import KNOBS, section_knobs

SETTERS = ("llm", "training", "resource_pools")
STORED_AS = {"model": "llm_model", "pools": "resource_pool_specs"}


def _arguments(setter: str) -> list[str]:
    parameters = inspect.signature(getattr(ATGRPOConfig, setter)).parameters
    return [name for name, p in parameters.items()
            if name != "self" and p.kind is inspect.Parameter.KEYWORD_ONLY]


@pytest.mark.parametrize("setter", SETTERS)
def test_every_argument_has_an_args_entry(setter):
    doc = inspect.getdoc(getattr(ATGRPOConfig, setter))
    documented = set(re.findall(r"^    (\w+):", doc.split("Args:")[1], flags=re.M))
    assert set(_arguments(setter)) <= documented, set(_arguments(setter)) - documented


@pytest.mark.parametrize("setter", SETTERS)
def test_every_argument_sets_its_attribute_and_nothing_else(setter):
    for name in _arguments(setter):
        config = ATGRPOConfig()
        before = dict(vars(config))
        marker = object()
        assert getattr(config, setter)(**{name: marker}) is config
        attribute = STORED_AS.get(name, name)
        assert getattr(config, attribute) is marker, name
        changed = {key for key, value in vars(config).items() if before.get(key) is not value}
        assert changed == {attribute}, (name, changed)


def test_rllib_training_arguments_still_pass_through():
    config = ATGRPOConfig().training(lr=3e-4, num_epochs=2, minibatch_size=4, num_branches=6)
    assert (config.lr, config.num_epochs, config.minibatch_size, config.num_branches) == (
        3e-4, 2, 4, 6)


@pytest.mark.parametrize("setter", SETTERS)
def test_the_setters_keywords_are_the_declared_knobs_in_order(setter):
    assert _arguments(setter) == [knob.key for knob in section_knobs(setter)]
    assert {knob.section for knob in KNOBS} == set(SETTERS)


def test_a_fresh_config_holds_every_knobs_default_and_the_docs_show_it():
    config = ATGRPOConfig()
    for knob in KNOBS:
        assert getattr(config, knob.stored_as) == knob.default, knob.key
        doc = " ".join(inspect.getdoc(getattr(ATGRPOConfig, knob.section)).split())
        entry = doc.split(f" {knob.key}: ", 1)[1]
        assert entry.startswith(" ".join(knob.doc.split()) + f" Default: ``{knob.default!r}``."), \
            knob.key


@pytest.mark.parametrize("setter", SETTERS)
def test_an_unknown_keyword_is_refused_naming_the_accepted_ones(setter):
    with pytest.raises(TypeError, match=r"got unknown keyword\(s\) \['num_brnaches'\]; accepted: "
                                        r"\[.*'" + section_knobs(setter)[0].key + "'"):
        getattr(ATGRPOConfig(), setter)(num_brnaches=4)


def test_a_mutable_default_is_not_shared_between_configs():
    first, second = ATGRPOConfig(), ATGRPOConfig()
    for knob in KNOBS:
        value = getattr(first, knob.stored_as)
        if isinstance(value, (dict, list)):
            assert value is not getattr(second, knob.stored_as), knob.key
