"""Models: torch modules that own their loss and return gradients (never apply them).

Subclass models.base.BaseModel and decorate with ``@register_model("name")``.
"""
import os

from core.registry import Registry, import_package_modules, publish
from models.base import BaseModel

MODEL_REGISTRY = publish(Registry("model", base_class=BaseModel, home=__name__))
register_model = MODEL_REGISTRY.register

import_package_modules(__name__, os.path.dirname(__file__))
