"""The policy on this machine: the tiny model in torch, a GRPO update on recorded tokens, saved for vLLM.

A sample is one rollout as NeMo-RL trains on it: its tokens, which of them the policy sampled (mask 1)
with the logprobs vLLM reported, and its reward. The update is GRPO's: advantages normalised within
each group (the samples of one prompt), a PPO-clip surrogate over the sampled tokens with vLLM's
logprobs as the old policy, one Adam step. Before it, the recorded logprobs are recomputed by teacher
forcing: their gap says whether vLLM served exactly these weights.

The tiny model's safeguards (a residual dimension that ends every turn, tokens it never samples) are
frozen: Adam moves every weight it touches by about its learning rate, however small the gradient,
and on a random model that erodes them within a few steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class Sample:
    tokens: list[int]
    mask: list[int]  # 1 where the policy sampled the token
    logprobs: list[float]  # vLLM's, where mask is 1
    reward: float
    group: int


def advantages(samples: list[Sample]) -> list[float]:
    """(r - mean) / (std + 1e-6) within each group; 0 for a group whose rewards are all equal."""
    out = [0.0] * len(samples)
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    for members in groups.values():
        rewards = torch.tensor([samples[i].reward for i in members])
        if len(members) < 2 or float(rewards.std()) == 0.0:
            continue
        normalised = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for i, a in zip(members, normalised.tolist(), strict=True):
            out[i] = a
    return out


class Policy:
    def __init__(self, path: Path, lr: float, clip: float = 0.2):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging

        from ..local.tiny_model import never_sampled

        logging.disable_progress_bar()  # a bar per save, every step, says nothing
        self.path = Path(path)
        self.model = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.clip = clip
        self._frozen = self._safeguards(never_sampled(self.tokenizer))

    def _safeguards(self, never: list[int]) -> list[tuple[torch.nn.Parameter, torch.Tensor]]:
        """(parameter, mask of entries that stay as built) for each safeguard of the tiny model."""
        m = self.model.model
        out = []
        embed = torch.zeros_like(m.embed_tokens.weight, dtype=torch.bool)
        embed[:, 0] = True  # the constant residual dimension
        out.append((m.embed_tokens.weight, embed))
        for layer in m.layers:
            for weight in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight):
                keep = torch.zeros_like(weight, dtype=torch.bool)
                keep[0, :] = True  # nothing writes that dimension
                out.append((weight, keep))
        head = torch.zeros_like(self.model.lm_head.weight, dtype=torch.bool)
        head[never, :] = True  # tokens it never samples
        head[:, 0] = True  # what reads the constant dimension: end of turn
        out.append((self.model.lm_head.weight, head))
        return out

    def _token_logprobs(self, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's logprob of each sampled token, and the positions they sit at."""
        ids = torch.tensor([sample.tokens])
        logits = self.model(ids).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        positions = torch.tensor([i for i, m in enumerate(sample.mask) if m and i > 0])
        return logprobs[positions - 1], positions

    @torch.no_grad()
    def logprob_error(self, samples: list[Sample]) -> float:
        """The largest gap between vLLM's logprob of a sampled token and this model's."""
        worst = 0.0
        for s in samples:
            mine, positions = self._token_logprobs(s)
            served = torch.tensor([s.logprobs[i] for i in positions.tolist()])
            worst = max(worst, float((mine - served).abs().max()))
        return worst

    @torch.enable_grad()  # whatever the caller's grad mode (it is thread state, and anyone may have set it)
    def update(self, samples: list[Sample]) -> dict[str, float]:
        """One GRPO step; no step (and no optimizer momentum spent) when no group has signal."""
        adv = advantages(samples)
        if not any(adv):
            return {"updated": 0.0, "loss": 0.0}
        self.optimizer.zero_grad()
        total, tokens = torch.zeros(()), 0
        for s, a in zip(samples, adv, strict=True):
            if a == 0.0:
                continue
            mine, positions = self._token_logprobs(s)
            old = torch.tensor([s.logprobs[i] for i in positions.tolist()])
            ratio = torch.exp(mine - old)
            surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * a)
            total = total - surrogate.sum()
            tokens += len(positions)
        loss = total / max(tokens, 1)
        loss.backward()
        for weight, keep in self._frozen:
            weight.grad[keep] = 0.0
        self.optimizer.step()
        return {"updated": 1.0, "loss": float(loss.detach())}

    @torch.no_grad()
    def first_token_probability(self, prompts: list[list[int]], tokens: list[int]) -> float:
        """Mean probability that the first answer token is one of `tokens`: a length-independent metric."""
        chosen = torch.tensor(tokens)
        total = 0.0
        for prompt in prompts:
            probs = torch.softmax(self.model(torch.tensor([prompt])).logits[0, -1].float(), -1)
            total += float(probs[chosen].sum())
        return total / max(len(prompts), 1)

    def save(self) -> None:
        """Overwrite the weights vLLM serves from (it reloads them in place)."""
        self.model.save_pretrained(self.path, safe_serialization=True)
