"""A session's harness logs kept outside the sandbox: full stdout and stderr up to a cap (the tail is
kept), and the harness's own small files from its HOME."""

from __future__ import annotations

from nemo_polar.harnesses import HARNESSES, logs
from nemo_polar.harnesses.logs import capped, keep_logs


def test_short_output_is_kept_whole_and_long_output_keeps_its_tail():
    assert capped("hello") == "hello"
    text = "a" * 100 + "THE END"
    kept = capped(text, cap=10)
    assert kept.endswith("aaaTHE END") and kept.startswith("[... 97 bytes cut ...]")


def test_keep_logs_writes_streams_and_matching_home_files(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".codex/sessions/2026/11").mkdir(parents=True)
    (home / ".codex/sessions/2026/11/rollout-1.jsonl").write_text('{"turn": 1}\n')
    (home / ".codex/sessions/2026/11/big.jsonl").write_text("x" * 200)
    (home / ".codex/auth.json").write_text("secret")  # not a log: not copied
    monkeypatch.setattr(logs, "FILE_CAP", 100)
    folder = keep_logs(tmp_path / "logs/s-1", "out\n", "err\n", home, HARNESSES["codex"].log_files)
    assert (folder / "stdout.txt").read_text() == "out\n" and (folder / "stderr.txt").read_text() == "err\n"
    assert (folder / "home/.codex/sessions/2026/11/rollout-1.jsonl").read_text() == '{"turn": 1}\n'
    assert not (folder / "home/.codex/auth.json").exists()
    assert not (folder / "home/.codex/sessions/2026/11/big.jsonl").exists()
    assert "big.jsonl (200 bytes)" in (folder / "skipped.txt").read_text()


def test_every_harness_names_its_own_files_relative_to_home():
    for cls in HARNESSES.values():
        assert all(not g.startswith("/") and ".." not in g for g in cls.log_files)
