"""The check every task with a ``rewards:`` mapping shares: env configs written before it
(flat coefficient keywords, an old checkpoint's) still load, as the same rewards."""

import pytest


def check_old_reward_keywords_load_as_rewards(env_class, config_class, old: dict, caplog,
                                              **env_kwargs) -> None:
    """``env_class(**old)`` holds ``config_class(**old)`` and logs the move; one coefficient
    given both as a keyword and in ``rewards`` is refused."""
    with caplog.at_level("WARNING"):
        env = env_class(**old, **env_kwargs)
    assert env.reward_config == config_class(**old)
    assert (f"{env_class.__name__} reward keywords {sorted(old)} are now entries of rewards"
            in caplog.text)
    name, value = next(iter(old.items()))
    with pytest.raises(ValueError, match="given both as keywords and in rewards"):
        env_class(**{name: value}, rewards={name: value}, **env_kwargs)
