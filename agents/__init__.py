"""Agents: turn a worker's experience into what its training loop learns from.

Subclass agents.base.OnPolicyAgent (trajectories -> gradients, PPO's loop) or
agents.base.OffPolicyAgent (transitions -> replay, batches -> gradients, SAC's loop) and
decorate with ``@register_agent("name")``; agents/base.py has the contracts.
"""
import os

from core.registry import Registry, import_package_modules, publish
from agents.base import BaseAgent, check_agent_class

AGENT_REGISTRY = publish(Registry("agent", base_class=BaseAgent, check=check_agent_class,
                                  home=__name__))
register_agent = AGENT_REGISTRY.register

import_package_modules(__name__, os.path.dirname(__file__))
