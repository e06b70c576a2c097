"""The bundled tasks, one module each; `TASKS` lists them in a fixed order."""

from __future__ import annotations

from ..model import BundledTask
from . import add_months, csv_split, deep_merge, duration, kv_cli, lru_cache, paginate, roman, semver, slugify

TASKS: tuple[BundledTask, ...] = tuple(
    m.TASK for m in (slugify, paginate, deep_merge, add_months, kv_cli, lru_cache, roman, csv_split, duration, semver)
)
