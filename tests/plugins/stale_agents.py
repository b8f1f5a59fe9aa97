"""Agents that lag on purpose: they load new weights only every other time they are handed
them, and keep the ones they have otherwise (tests/test_lags.py: the lag columns must see it).

    python main.py --user_dir tests/plugins --agent_name stale_ppo_agent --num_workers 0
"""
from agents import register_agent
from agents.default_agent import DefaultAgent
from agents.sac_agent import SACAgent


class SkipsEveryOtherLoad:
    def sync_weights(self, weights, version):
        if weights is None:
            return
        self.offers = getattr(self, "offers", 0) + 1
        if self.offers % 2 == 0:  # the injected lag: these weights are not loaded
            return
        super().sync_weights(weights, version)


@register_agent("stale_ppo_agent")
class StalePPOAgent(SkipsEveryOtherLoad, DefaultAgent):
    """PPO's agent, loading every other set of weights it is handed (a lag, for tests)."""


@register_agent("stale_sac_agent")
class StaleSACAgent(SkipsEveryOtherLoad, SACAgent):
    """SAC's agent, loading every other set of weights it is handed (a lag, for tests)."""
