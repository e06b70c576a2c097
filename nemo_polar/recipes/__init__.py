"""NeMo-RL GRPO recipes (`recipes/*.yaml`): loaded the way NeMo-RL loads them, checked against its schema."""

from .check import check, check_recipe
from .loader import apply_overrides, load_recipe

__all__ = ["apply_overrides", "check", "check_recipe", "load_recipe"]
