"""LightRetriever's model: the backbone with its LM head and tokenizer, the encoders of every side
(full-size EOS pooling, cached-token light dense, log-saturated LM-head sparse, token counts), save and
load, and the losses (contrastive, Eq. 5's KL, Eq. 9's FLOPS with its ramp, MRL)."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.methods.lightretriever.settings import train_signature
from harness.models.runtime import torch_for

LM_DIR = "lm"                # the whole model (no LoRA), or, with LoRA, the tokenizer only
ADAPTER_DIR = "adapter"      # with LoRA: the adapter alone (peft); load() rebuilds the base and merges it
INFO_FILE = "lightretriever.json"
PROMPT = "Instruct: {task}\nQuery: "


def doc_text(d) -> str:
    """A passage as the document encoder reads it: ``{title} {text}``."""
    return f"{d.title} {d.text}".strip()


def token_vectors(model: Any, prompt_ids: Sequence[int], token_ids: Sequence[int], eos_id: int, **kw: Any):
    """[len(token_ids), hidden]: row i is the last hidden state at the final [eos] of ``prompt_ids +
    [token_ids[i], eos_id]`` (Eq. 3). Decoders pack many tokens per forward pass with App. A.5's block
    attention mask and position ids; bidirectional encoders run the separate sequences (a block mask
    cannot reproduce them there). Gradients flow (training); wrap in ``torch.no_grad`` to cache.
    See :func:`harness.methods.lightretriever.ops.token_vectors`."""
    from harness.methods.lightretriever import ops

    return ops.token_vectors(model, prompt_ids, token_ids, eos_id, **kw)


class LightModel:
    """The backbone with its LM head, its tokenizer, and the encoders of every side."""

    def __init__(self, lm: Any, tok: Any, s: Mapping[str, Any]) -> None:
        from harness.methods.lightretriever import ops

        self.lm, self.tok, self.s = lm, tok, s  # not dict(s): a copy reads every setting
        self.base = lm.base_model if not hasattr(lm, "get_base_model") else lm.get_base_model().base_model
        self.causal = ops.is_causal(self.base)
        if self.causal:
            self.bos, self.eos = tok.bos_token_id, tok.eos_token_id
        else:
            self.bos, self.eos = tok.cls_token_id, tok.sep_token_id
        if self.eos is None:
            raise ConfigError(f"backbone {s['backbone']!r}: its tokenizer has no end-of-sequence token for EOS pooling")
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos
        self.base_of_adapter: dict[str, Any] | None = None  # with LoRA: what load() rebuilds the base from

    # -- loading
    @classmethod
    def from_backbone(cls, cfg: Mapping[str, Any], s: Mapping[str, Any]) -> LightModel:
        from harness.models import backbones

        lm = backbones.load_lm(cfg, s["backbone"])
        tok = backbones.load_tokenizer(cfg, s["backbone"])
        base = None
        if s.get("lora"):
            from peft import LoraConfig, get_peft_model

            base = {"backbone": s["backbone"], "spec": dict(cfg["backbones"][s["backbone"]]),
                    "seed": int(cfg.get("seed", 0)), "fingerprint": backbones.fingerprint(lm)}
            lo = s["lora"]
            lm = get_peft_model(lm, LoraConfig(r=int(lo.get("r", 16)), lora_alpha=float(lo.get("alpha", 32)),
                                               lora_dropout=float(lo.get("dropout", 0.1)),
                                               target_modules=lo.get("target_modules", "all-linear")))
        model = cls(lm, tok, s)
        model.base_of_adapter = base
        return model

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> LightModel:
        """The saved model, its LoRA adapter (where it was trained with one) merged into the base
        rebuilt from the backbone it names, which must be the one it was trained on, on ``device``
        (index and search jobs: the section's, :func:`harness.models.runtime.encode_device`; their
        vectors come back as CPU arrays)."""
        from transformers import AutoTokenizer

        folder = Path(folder)
        info = json.loads((folder / INFO_FILE).read_text())
        if (folder / ADAPTER_DIR).is_dir():
            lm = _merged(folder, info["base"])
        else:
            lm = _load_lm(str(folder / LM_DIR))
        tok = AutoTokenizer.from_pretrained(folder / LM_DIR)
        model = cls(lm, tok, info["settings"])
        model.lm.eval()
        if device != "cpu":
            model.lm.to(device)
        return model

    def save(self, folder: Path) -> None:
        """The model: with LoRA, the adapter alone (peft's save; megabytes where the merged 8B model is
        32 GB in float32) beside what its base is rebuilt from; otherwise the whole model."""
        folder = Path(folder)
        info: dict[str, Any] = {"settings": train_signature(self.s) | {"backbone": self.s["backbone"]},
                                "causal": self.causal}
        if self.base_of_adapter is not None and hasattr(self.lm, "peft_config"):
            self.lm.save_pretrained(folder / ADAPTER_DIR)
            info["base"] = self.base_of_adapter
        else:
            lm = self.lm.merge_and_unload() if hasattr(self.lm, "merge_and_unload") else self.lm
            lm.save_pretrained(folder / LM_DIR)
        self.tok.save_pretrained(folder / LM_DIR)
        (folder / INFO_FILE).write_text(json.dumps(info, indent=1, default=str))

    @property
    def hidden(self) -> int:
        return int(self.base.config.hidden_size)

    @property
    def vocab(self) -> int:
        return int(self.head()[1].shape[0])

    def head(self):
        """(transform of the hidden states, projection weight [V, H], bias [V] | None): BERT's MLM head
        is a dense + GELU + LayerNorm transform then the decoder; a decoder LLM's is its lm_head."""
        lm = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm
        out = lm.get_output_embeddings()
        if hasattr(lm, "cls") and hasattr(lm.cls, "predictions"):
            return lm.cls.predictions.transform, out.weight, out.bias
        return (lambda h: h), out.weight, getattr(out, "bias", None)

    # -- token ids
    def ids(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        """Token ids without special tokens, truncated to ``max_len`` (a leading space: the authors' rule
        for sparse queries; BERT's tokenizer ignores it)."""
        enc = self.tok([" " + t for t in texts], add_special_tokens=False, truncation=True, max_length=max_len)
        return [list(x) for x in enc["input_ids"]]

    def prompt_ids(self, instruction: str | None) -> list[int]:
        """``[bos] + Instruct: {task}\\nQuery: `` (just ``[bos]`` without an instruction)."""
        pre = [self.bos] if self.bos is not None else []
        if instruction is None:
            return pre
        return pre + list(self.tok(PROMPT.format(task=instruction), add_special_tokens=False)["input_ids"])

    def _pack(self, rows: Sequence[Sequence[int]]):
        torch = torch_for(self.s)
        n = max(len(r) for r in rows)
        ids = torch.full((len(rows), n), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, :len(r)] = 1
        dev = self.base.device
        return ids.to(dev), mask.to(dev)

    def forward(self, prompt: Sequence[int], bodies: Sequence[Sequence[int]]):
        """Hidden states [B, T, H] and attention mask of ``prompt + body + [eos]`` per row."""
        ids, mask = self._pack([list(prompt) + list(b) + [self.eos] for b in bodies])
        return self.base(input_ids=ids, attention_mask=mask).last_hidden_state, mask

    # -- encoders
    @staticmethod
    def eos_pool(h, mask):
        from harness.methods.lightretriever.ops import eos_pool

        return eos_pool(h.float(), mask)

    def sparse_vectors(self, h, mask, n_prefix: int):
        """Max-pooled log-saturated LM-head logits over the body positions (the prefix, the final
        [eos] and padding excluded), [B, V] (fused projection-then-max)."""
        import torch

        from harness.methods.lightretriever import ops

        transform, w, b = self.head()
        keep = mask.clone().bool()
        keep[:, :n_prefix] = False
        keep[torch.arange(h.shape[0], device=h.device), mask.sum(1) - 1] = False
        return ops.sparse_doc_vector(transform(h), w, b, keep).float()

    def token_vectors(self, prompt: Sequence[int], tokens: Sequence[int], **kw: Any):
        """:func:`token_vectors` on the backbone; ``kw``: its packing (``max_len``, ``batch_size``)."""
        return token_vectors(self.base, list(prompt), list(tokens), self.eos, **kw)

    def light_mean(self, prompt: Sequence[int], rows: Sequence[Sequence[int]], *, embedding: bool = False,
                   table: tuple[Sequence[int], Any] | None = None):
        """Mean of the rows' token vectors (cached-token encoder, or the input embedding table), normalised;
        ``table``: (the rows' distinct tokens in order, their vectors) where they were encoded already
        (a GradCache step's sub-batches)."""
        import torch

        from harness.methods.lightretriever.ops import mean_rows

        uniq = sorted({t for r in rows for t in r})
        if not uniq:
            return torch.zeros(len(rows), self.hidden, device=self.base.device)
        if table is not None and table[1] is not None:
            if list(table[0]) != uniq:
                raise ValueError("light_mean: the table's tokens are not the rows' distinct tokens")
            vectors = table[1]
        elif embedding:
            vectors = self.base.get_input_embeddings()(torch.tensor(uniq, device=self.base.device))
        else:
            vectors = self.token_vectors(prompt, uniq)
        pos = {t: i for i, t in enumerate(uniq)}
        out = mean_rows(vectors, [[pos[t] for t in r] for r in rows])
        return torch.nn.functional.normalize(out.float(), dim=-1)

    def counts(self, rows: Sequence[Sequence[int]], *, binary: bool = False):
        import torch

        v = torch.zeros(len(rows), self.vocab, device=self.base.device)
        for i, r in enumerate(rows):
            if r:
                idx = torch.tensor(r, device=v.device)
                v[i].index_add_(0, idx, torch.ones(len(r), device=v.device))
        return v.clamp(max=1.0) if binary else v

    def cache_table(self, instruction: str | None, *, tokens: Sequence[int] | None = None, batch_size: int = 256):
        """All V token vectors of one instruction in an EmbeddingBag(mode="mean") (serving, §2.2), or
        only the rows of ``tokens`` (row i is token ``tokens[i]``'s vector: each token's vector is
        its own forward pass, so a search over known queries needs only the tokens they hold)."""
        import torch

        from harness.methods.lightretriever import ops

        prompt = self.prompt_ids(instruction)
        ids = list(range(self.vocab)) if tokens is None else [int(t) for t in tokens]
        with torch.inference_mode():
            if self.s["dense_query"] == "embedding":
                vecs = self.base.get_input_embeddings().weight.detach().float()[ids]   # indexing copies
            else:
                vecs = token_vectors(self.base, prompt, ids, self.eos, batch_size=batch_size).float()
        return ops.build_table(vecs)


def _merged(folder: Path, base: Mapping[str, Any]):
    """The base model rebuilt from ``base`` (its backbone's config entry and seed, as saved by
    :meth:`LightModel.save`) with the adapter of ``folder`` merged into it; a base whose weights are
    not those trained on (its fingerprint) is refused, naming both."""
    from peft import PeftModel

    from harness.errors import DataError
    from harness.models import backbones

    lm = backbones.load_lm({"backbones": {base["backbone"]: base["spec"]}, "seed": base["seed"]}, base["backbone"])
    got = backbones.fingerprint(lm)
    if got != base["fingerprint"]:
        raise DataError(f"{folder / INFO_FILE}: the LoRA adapter was trained on backbone {base['backbone']!r} "
                        f"({base['spec'].get('source')}) with weights {base['fingerprint']}; rebuilt here it has {got}",
                        fix="load it where the backbone's weights are the same (the same model revision; for a "
                            "config: backbone, the same torch), or re-run its train job here")
    return PeftModel.from_pretrained(lm, str(folder / ADAPTER_DIR)).merge_and_unload()


def _load_lm(path: str):
    """A saved model with its LM head (:func:`harness.models.backbones.lm_class` picks the class)."""
    from transformers import AutoConfig

    from harness.models.backbones import lm_class

    return lm_class(AutoConfig.from_pretrained(path)).from_pretrained(path)


# --------------------------------------------------------------------------------------------
# losses


def contrastive(scores, n_docs_per_q: int):
    """Cross-entropy with query i's positive at column i * n_docs_per_q (Eq. 2)."""
    import torch

    target = torch.arange(scores.shape[0], device=scores.device) * n_docs_per_q
    return torch.nn.functional.cross_entropy(scores, target)


def kl_align(student, teacher):
    """Eq. 5: KL(softmax(teacher) || softmax(student)), teacher detached, batch mean."""
    import torch

    return torch.nn.functional.kl_div(torch.log_softmax(student, -1), torch.softmax(teacher.detach(), -1),
                                      reduction="batchmean")


def flops(w):
    """Eq. 9: sum over the vocabulary of the squared batch-mean weights."""
    return (w.mean(0) ** 2).sum()


def ramp(step: int, ramp_steps: int) -> float:
    """Quadratic increase to 1 over ``ramp_steps`` (SPLADE)."""
    return 1.0 if ramp_steps <= 0 else min(1.0, (step / ramp_steps) ** 2)


def mrl(a, b, dim: int):
    import torch

    return torch.nn.functional.normalize(a[:, :dim], dim=-1), torch.nn.functional.normalize(b[:, :dim], dim=-1)
