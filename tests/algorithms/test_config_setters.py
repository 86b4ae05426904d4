"""``ATGRPOConfig``'s own setters, RLlib style: every argument is documented in the setter's
Args and sets the attribute of the same name (``model`` is stored as ``llm_model``: RLlib's
``model`` is its old-stack model dict); arguments left out change nothing."""

import inspect
import re

import pytest

from pettingllms_rllib.algorithms import ATGRPOConfig

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
