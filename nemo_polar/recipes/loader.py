"""Load a recipe as NeMo-RL does (research/nemo_rl.md §4), without importing NeMo-RL.

- `defaults:` at the top (a path or a list of paths, relative to the file) names parent recipes, loaded
  recursively and merged in order: later parents win, the child wins over all of them.
- A mapping with `_override_: true` replaces the parent's section instead of merging into it.
- Overrides use Hydra's grammar: `a.b=v` changes an existing key only, `+a.b=v` adds a new one,
  `++a.b=v` adds or changes, `~a.b` deletes.
- Resolvers `${add:..}`, `${mul:..}`, `${div:..}`, `${max:..}` plus OmegaConf's own (`${oc.env:..}`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

OVERRIDE = "_override_"


class RecipeError(Exception):
    """A recipe or an override is wrong; `key` names where."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def register_resolvers() -> None:
    for name, fn in {
        "add": lambda *xs: sum(xs),
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "max": lambda *xs: max(xs),
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def _replaced_sections(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the child's `_override_: true` mappings (the markers are removed)."""
    out = []
    if isinstance(node, DictConfig):
        if node.get(OVERRIDE) is True:
            out.append(prefix)
            del node[OVERRIDE]
        for key in list(node.keys()):
            out += _replaced_sections(node._get_node(key), f"{prefix}.{key}" if prefix else str(key))
    return out


def _delete(cfg: DictConfig, dotted: str) -> None:
    *parents, last = dotted.split(".")
    node = cfg
    for part in parents:
        if not isinstance(node, DictConfig) or part not in node:
            return
        node = node._get_node(part)
    if isinstance(node, DictConfig) and last in node:
        del node[last]


def load_recipe(path: str | Path, _seen: tuple[Path, ...] = ()) -> DictConfig:
    """The recipe with its `defaults:` chain merged, unresolved (so overrides can still apply)."""
    path = Path(path).resolve()
    if path in _seen:
        raise RecipeError("defaults", f"{path.name} includes itself: {' -> '.join(p.name for p in _seen + (path,))}")
    if not path.is_file():
        raise RecipeError("defaults", f"no such recipe: {path}")
    cfg = OmegaConf.load(path)
    if not isinstance(cfg, DictConfig):
        raise RecipeError("<root>", f"{path.name} is not a mapping")
    parents = cfg.pop("defaults", None)
    replaced = _replaced_sections(cfg)
    if parents is None:
        return cfg
    if isinstance(parents, str):
        parents = [parents]
    base = OmegaConf.create({})
    for parent in parents:
        base = OmegaConf.merge(base, load_recipe(path.parent / str(parent), _seen + (path,)))
    for section in replaced:
        _delete(base, section)
    return OmegaConf.merge(base, cfg)  # type: ignore[return-value]


_MISSING = object()


def _exists(cfg: DictConfig, dotted: str) -> bool:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return True


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """Apply Hydra-grammar overrides with NeMo-RL's struct rules; RecipeError names the first bad one."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as exc:
            key = text.lstrip("+~").split("=", 1)[0]
            raise RecipeError(key, f"bad override {text!r}: {str(exc).splitlines()[0]}") from None
        key = override.key_or_group
        if override.package is not None:
            raise RecipeError(key, f"{text!r}: packages (@) have no meaning in a recipe")
        if override.is_sweep_override():
            raise RecipeError(key, f"{text!r}: sweeps are not supported by NeMo-RL's loader")
        exists = _exists(cfg, key)
        if override.type == OverrideType.DEL:
            if not exists:
                raise RecipeError(key, f"{text!r}: cannot delete a key the recipe does not have")
            _delete(cfg, key)
            continue
        if override.type == OverrideType.CHANGE and not exists:
            raise RecipeError(key, f"{text!r}: not a key of the recipe (add it with +{key}=... if intended)")
        if override.type == OverrideType.ADD and exists:
            raise RecipeError(key, f"{text!r}: already in the recipe (drop the +, or use ++)")
        OmegaConf.update(cfg, key, override.value(), merge=True, force_add=True)
    return cfg


def resolve(cfg: DictConfig) -> dict[str, Any]:
    """Interpolations resolved, as NeMo-RL does once before validation."""
    register_resolvers()
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except Exception as exc:  # omegaconf's InterpolationResolutionError and friends carry the full key
        key = getattr(exc, "full_key", None) or "<interpolation>"
        raise RecipeError(str(key), str(exc).splitlines()[0]) from None
