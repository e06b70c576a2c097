"""The policy on this machine: the tiny model in torch, a GRPO update on recorded tokens, saved for vLLM.

A sample is one rollout as NeMo-RL trains on it: its tokens, which of them the policy sampled (mask 1)
with the logprobs vLLM reported, and its reward. Two updates, one Adam step each. `update`, our own:
advantages normalised within each group (the samples of one prompt), a PPO-clip surrogate over the
sampled tokens with vLLM's logprobs as the old policy. `update_by`: a loss computed elsewhere from this
model's next-token logprobs on a batch of token ids (NeMo-RL's GRPO advantages and `ClippedPGLossFn`, in
NeMo-RL's own process, `nemo_polar.nemo_rl`), whose gradient with respect to those logprobs comes back
and is back-propagated through the model. Before either, the recorded logprobs are recomputed by teacher
forcing, each call's by the weights of the policy version that sampled it: their gap says whether vLLM served
exactly those weights.

The tiny model's safeguards (a residual dimension that ends every turn, tokens it never samples) are
frozen: Adam moves every weight it touches by about its learning rate, however small the gradient,
and on a random model that erodes them within a few steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..records import CompletionRecord

# a loss seen through the policy's next-token logprobs ([B, S-1]): its value, d loss / d logprobs ("grad",
# same shape) and the token-level advantages it used ("advantages", [B, S])
LossOfLogprobs = Callable[[list[list[float]]], dict[str, Any]]


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
        self._versions: dict[int, dict[str, torch.Tensor]] = {}  # policy version -> its weights (`remember`)

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
        logprobs = self.next_token_logprobs([sample.tokens])[0]
        positions = torch.tensor([i for i, m in enumerate(sample.mask) if m and i > 0])
        return logprobs[positions - 1], positions

    def remember(self, version: int, keep: int) -> None:
        """The weights now, as policy `version`: kept while a call they sampled may still train (the last `keep`)."""
        self._versions[version] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        for old in sorted(self._versions)[:-keep]:
            del self._versions[old]

    @torch.no_grad()
    def logprob_error(self, calls: list[CompletionRecord]) -> float:
        """The largest gap between a call's recorded logprob of a token it sampled and the logprob the weights of
        the policy version that sampled it give (each call against its own version, whatever the weights are now):
        whether vLLM served exactly the weights it says."""
        by_version: dict[int, list[CompletionRecord]] = {}
        for r in calls:
            if r.trainable and r.completion_token_ids:
                by_version.setdefault(int(r.upstream.policy_version or 0), []).append(r)
        now = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        worst = 0.0
        try:
            for version, records in by_version.items():
                self.model.load_state_dict(self._versions[version])
                # a forward for 16 calls at once, padded at the end (which changes nothing before it): fewer
                # forwards than one a call, and memory bounded by 16 rows' logits however many calls a step has
                for k in range(0, len(records), 16):
                    chunk = records[k : k + 16]
                    sequences = [r.prompt_token_ids + r.completion_token_ids for r in chunk]
                    width = max(map(len, sequences))
                    logprobs = self.next_token_logprobs([q + [0] * (width - len(q)) for q in sequences])
                    for r, row in zip(chunk, logprobs, strict=True):
                        start = len(r.prompt_token_ids) - 1
                        mine = row[start : start + len(r.completion_token_ids)]
                        worst = max(worst, float((mine - torch.tensor(r.completion_logprobs)).abs().max()))
        finally:
            self.model.load_state_dict(now)
        return worst

    @torch.enable_grad()  # whatever the caller's grad mode (it is thread state, and anyone may have set it)
    def update(self, samples: list[Sample]) -> dict[str, float]:
        """One GRPO step; no step (and no optimizer momentum spent) when no group has signal."""
        if not any(advantages(samples)):
            return {"updated": 0.0, "loss": 0.0}
        self.optimizer.zero_grad()
        loss = self.backward(samples)
        self._step()
        return {"updated": 1.0, "loss": loss}

    @torch.enable_grad()
    def update_by(self, input_ids: list[list[int]], loss: LossOfLogprobs) -> dict[str, float]:
        """One GRPO step whose loss another's code computes (NeMo-RL's, in its own process): no step when
        its advantages are all 0, as `update`."""
        self.optimizer.zero_grad()
        answer = self.backward_by(input_ids, loss)
        if not any(a for row in answer["advantages"] for a in row):
            self.optimizer.zero_grad()
            return {"updated": 0.0, "loss": 0.0}
        self._step()
        return {"updated": 1.0, "loss": answer["loss"]}

    def next_token_logprobs(self, input_ids: list[list[int]]) -> torch.Tensor:
        """[B, S-1]: each token's logprob after the ones before it (padding at the end changes nothing before)."""
        ids = torch.tensor(input_ids)
        logits = self.model(ids).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    @torch.enable_grad()
    def backward_by(self, input_ids: list[list[int]], loss: LossOfLogprobs) -> dict[str, Any]:
        """Gradients of `loss`, which sees the model only through its next-token logprobs: they go out,
        d loss / d logprobs comes back (`answer["grad"]`) and is back-propagated here (the chain rule, exact)."""
        logprobs = self.next_token_logprobs(input_ids)
        answer = loss(logprobs.detach().tolist())
        logprobs.backward(torch.tensor(answer["grad"], dtype=logprobs.dtype))
        return answer

    @torch.enable_grad()
    def backward(self, samples: list[Sample]) -> float:
        """Our own GRPO loss's gradients: group-normalised advantages, PPO-clip on vLLM's logprobs.

        The loss is a sum over samples, so each sample is back-propagated on its own: memory holds one
        row's activations (its [S, vocab] logits), not the whole batch's."""
        adv = advantages(samples)
        tokens = max(sum(sum(s.mask[1:]) for s, a in zip(samples, adv, strict=True) if a), 1)
        loss = 0.0
        for s, a in zip(samples, adv, strict=True):
            if a == 0.0:
                continue
            mine, positions = self._token_logprobs(s)
            old = torch.tensor([s.logprobs[i] for i in positions.tolist()])
            ratio = torch.exp(mine - old)
            surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * a)
            part = -surrogate.sum() / tokens
            part.backward()
            loss += float(part.detach())
        return loss

    def _step(self) -> None:
        for weight, keep in self._frozen:
            weight.grad[keep] = 0.0
        self.optimizer.step()

    @torch.no_grad()
    def first_token_probability(self, prompts: list[list[int]], tokens: list[int]) -> float:
        """Mean probability that the first answer token is one of `tokens`: a length-independent metric."""
        if not prompts:
            return 0.0
        width = max(map(len, prompts))
        logits = self.model(torch.tensor([p + [0] * (width - len(p)) for p in prompts])).logits  # one forward
        last = logits[torch.arange(len(prompts)), torch.tensor([len(p) - 1 for p in prompts])].float()
        return float(torch.softmax(last, -1)[:, torch.tensor(tokens)].sum(-1).mean())

    def save(self) -> None:
        """Overwrite the weights vLLM serves from (it reloads them in place)."""
        self.model.save_pretrained(self.path, safe_serialization=True)
