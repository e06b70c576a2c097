"""Harness adapters: how each agent CLI is launched, unchanged, against the proxy. One module each:
its class (a `Harness` with a `name`) is the registration; a task may also name its own subclass as
`"package.module:Class"`."""

from ..plugins import Registry
from .base import Endpoint, Harness, HarnessSettings, Inside, Launch

HARNESSES: Registry[Harness] = Registry("harness", Harness, __name__)

__all__ = ["HARNESSES", "Endpoint", "Harness", "HarnessSettings", "Inside", "Launch"]
