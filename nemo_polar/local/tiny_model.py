"""A tiny chat model built locally, with no hub: the inference server of every local test.

A byte-level BPE tokenizer is trained on this Python's standard library sources, a random Qwen2 is
initialised from a fixed seed, and a ChatML template with Hermes-style tool calls is attached, so
vLLM serves it like any Qwen chat model. Two deterministic edits make a random model usable by
real harnesses:
- every answer ends by itself: one residual dimension is held constant through the layers (set in
  the embeddings, never written by attention or MLP outputs) and only `<|im_end|>` reads it, so
  each step ends the turn with a calibrated probability (about 1 in `mean_tokens`);
- control tokens (`<|im_start|>`, `<tool_call>`, ...) and tokens that are not printable text on
  their own (stray UTF-8 bytes, control characters) are never sampled: their logits read the same
  dimension negatively. Every answer then decodes to clean text, token by token.
Same seed, same Python -> same files.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]

CHAT_TEMPLATE = """{%- macro text(content) -%}
{%- if content is string -%}{{ content }}{%- elif content -%}
{%- for p in content if p.type == 'text' -%}{{ p.text }}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ text(messages[0].content) }}{% else %}You are a helpful assistant.{% endif %}

# Tools

You may call one or more functions. Function signatures are within <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each call, return a JSON object with the function name and arguments within <tool_call></tool_call>:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' -%}
<|im_start|>system
{{ text(messages[0].content) }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ text(message.content) }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' -%}
<|im_start|>assistant
{% set reasoning = message.reasoning_content or message.reasoning -%}
{%- if reasoning %}<think>
{{ reasoning }}
</think>

{% endif -%}
{{ text(message.content) }}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{{ text(message.content) }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""


def corpus(limit: int = 150) -> list[str]:
    """The first `limit` standard-library modules, sorted: the same text on every machine with this Python."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py"))[:limit]
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=CONTROL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=[],
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(MARKUP)  # plain added tokens, as Qwen has them: visible in text, one id each
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path, seed: int = 0, vocab_size: int = 4096, mean_tokens: float = 12.0) -> Path:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=(len(tokenizer) + 63) // 64 * 64,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config).eval()
    _hold_constant_dimension(model)
    probe = _probe(tokenizer)
    _calibrate_end_of_turn(model, probe, never_sampled(tokenizer), config.eos_token_id, 1.0 / mean_tokens)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id).save_pretrained(out)
    (out / "polar_tiny.json").write_text(
        json.dumps(
            {
                "seed": seed,
                "vocab_size": vocab_size,
                "mean_tokens": mean_tokens,
                "python": sys.version.split()[0],
                "params": sum(p.numel() for p in model.parameters()),
            },
            indent=2,
        )
    )
    return out


def _hold_constant_dimension(model, value: float = 4.0) -> None:
    import torch

    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = value
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0  # nothing writes dimension 0 of the residual stream
            layer.mlp.down_proj.weight[0, :] = 0.0


def never_sampled(tokenizer) -> list[int]:
    ids = [tokenizer.convert_tokens_to_ids(t) for t in CONTROL + MARKUP]
    for i in range(len(tokenizer)):
        text = tokenizer.decode([i])
        if "\ufffd" in text or any(ord(ch) < 32 and ch not in "\n\t" for ch in text):
            ids.append(i)
    return ids


def _probe(tokenizer):
    """Chat prompts over library text: what the model sees when a harness talks to it."""
    import torch

    texts = [t[:1500] for t in corpus()[:8]]
    rows = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t[:700]}, {"role": "assistant", "content": t[700:]}],
            tokenize=True,
        )
        for t in texts
    ]
    rows = [r["input_ids"] if hasattr(r, "keys") else r for r in rows]
    n = min(len(r) for r in rows)
    return torch.tensor([r[:n] for r in rows])


def _calibrate_end_of_turn(model, probe, never: list[int], eos: int, target: float) -> None:
    """Pick the end-of-turn weight so that P(<|im_end|>) averages `target` on chat text."""
    import torch

    head = model.lm_head.weight
    with torch.no_grad():
        for tid in never:
            head[tid, :] = 0.0
            head[tid, 0] = -20.0
        lo, hi = 0.0, 20.0
        for _ in range(30):  # bisection: the mean probability grows with the weight
            head[eos, 0] = (lo + hi) / 2
            p = torch.softmax(model(probe).logits.float(), -1)[..., eos].mean().item()
            lo, hi = (head[eos, 0].item(), hi) if p < target else (lo, head[eos, 0].item())
