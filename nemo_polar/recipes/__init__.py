"""NeMo-RL GRPO recipes (`recipes/*.yaml`), judged by NeMo-RL's own code and checked at the seam with ours."""

from .check import POLAR_AGENT_PATH, check, check_recipe, check_recipes

__all__ = ["POLAR_AGENT_PATH", "check", "check_recipe", "check_recipes"]
