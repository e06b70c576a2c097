"""Token ids as the text the page shows, with the run's tokenizer (`tokenizers`, no transformers).

A run folder does not name its model's files, only the name it was served under: a tokenizer is
the folder given (`--tokenizer`, or the model a `polar learn` run folder keeps), else that name when
it is a folder with a `tokenizer.json`, else the tiny model when the name is the one `polar vllm` and
`polar up` serve it as. Without one, ids show.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

from ..paths import TINY_MODEL


def _byte_decoder() -> dict[str, int]:
    """Byte-level BPE's printable stand-ins for the 256 bytes (GPT-2's table), reversed."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


class Vocab:
    """id -> text for one tokenizer; a token that is part of a UTF-8 character shows its bytes."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        self._tok = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self._bytes = _byte_decoder()

    def text(self, token_id: int) -> str:
        text = self._tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" not in text:
            return text
        piece = self._tok.id_to_token(token_id) or ""
        if all(c in self._bytes for c in piece):
            return "".join(f"<0x{self._bytes[c]:02X}>" for c in piece)
        return piece or f"<{token_id}>"

    def texts(self, ids: Iterable[int]) -> dict[str, str]:
        """The text of each distinct id, keyed as JSON keys are (strings)."""
        return {str(i): self.text(i) for i in set(ids)}


@cache
def load(folder: str) -> Vocab:
    return Vocab(folder)


def find(explicit: str | None, served_models: Iterable[str]) -> Vocab | None:
    """The tokenizer to show tokens with, or None (ids)."""
    if explicit:
        if not (Path(explicit) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"no tokenizer.json in {explicit}")
        return load(str(Path(explicit).resolve()))
    for name in served_models:
        if name and (Path(name) / "tokenizer.json").is_file():
            return load(str(Path(name).resolve()))
        if name == "tiny" and (TINY_MODEL / "tokenizer.json").is_file():
            return load(str(TINY_MODEL))
    return None
