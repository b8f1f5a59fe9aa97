"""The agent contracts, for plugin authors: ``BaseAgent``, ``OnPolicyAgent`` (PPO's loop) and
``OffPolicyAgent`` (SAC's loop). They are defined beside the training loops that call them
(core/algos/agents.py, which says what each loop calls and when); a plugin subclasses them from
here or from there alike."""
from core.algos.agents import BaseAgent, OffPolicyAgent, OnPolicyAgent, check_agent_class

__all__ = ["BaseAgent", "OffPolicyAgent", "OnPolicyAgent", "check_agent_class"]
