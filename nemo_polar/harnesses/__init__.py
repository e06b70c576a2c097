"""Harness adapters, one module each; their names are in `nemo_polar.plugins.HARNESSES`."""

from ..plugins import HARNESSES
from .base import Endpoint, Harness, HarnessSettings, Inside, Launch

__all__ = ["HARNESSES", "Endpoint", "Harness", "HarnessSettings", "Inside", "Launch"]
