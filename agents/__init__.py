"""Agents: turn a worker's trajectories into gradients (send_trajectory, fetch_grads).

Subclass agents.base.BaseAgent and decorate with ``@register_agent("name")``.
"""
import os

from core.registry import Registry, import_package_modules
from agents.base import BaseAgent

AGENT_REGISTRY = Registry("agent", base_class=BaseAgent)
register_agent = AGENT_REGISTRY.register

import_package_modules(__name__, os.path.dirname(__file__))
