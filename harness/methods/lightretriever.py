"""LightRetriever (Ma et al.): a full-size document encoder, queries encoded by a table lookup.

One training run (``train_step``) trains, on one backbone and jointly as the authors' release does:

- the **full-size symmetric baseline** (Figure 2): queries ``[bos] Instruct: {task}\\nQuery: {q} [eos]``
  and documents ``[bos] {title} {text} [eos]`` through the same encoder, EOS (last-token) pooling,
  cosine similarity, contrastive loss at temperature 0.02 over in-batch and BM25 hard negatives;
- **light dense** (§2.2): a query token's vector is the EOS state of ``[bos] + instruction + token +
  [eos]`` (:func:`token_vectors`: decoders pack many tokens per pass with App. A.5's block mask;
  BERT stand-ins run the separate sequences), a query is the mean of its tokens' vectors; trained end
  to end through the full query encoder against the full-size document vectors; after training all V
  token vectors are cached in an ``nn.EmbeddingBag(mode="mean")`` (rebuilt per task instruction);
- **light sparse** (§2.3): the query vector is the counts of its token ids (no special tokens, no
  instruction); the document vector is max over positions of log(1 + ReLU(h P)) through the LM head,
  computed by the fused projection-then-max of App. A.5 (``harness.models.lr_ops``); FLOPS
  regulariser with a quadratic ramp; temperature 1.0; documents indexed as a Lucene impact index
  (weights x100 rounded) and searched with the query's counts as impacts;
- the auxiliary **KL** of Eq. 5 (light scores towards the detached full-size scores; ``kl``) and
  **MRL** over nested dims (``mrl_dims``); each batch comes from one training set.

Systems of the main model on each evaluation set: ``lightretriever`` (light dense),
``lightretriever.base`` (the full-size baseline), ``lightretriever.sparse``, ``lightretriever.hybrid``
(per-query min-max interpolation, ``hybrid_weights``, the shared fusion step) and
``lightretriever.topk<k>`` (Figure 5: documents' top-k sparse terms). A variant ``v`` (Tables 3, 4,
Figure 5's MRL) is its own model with systems ``lightretriever.v`` (dense), ``lightretriever.v-base``,
``lightretriever.v-sparse``, ``lightretriever.v-hybrid`` and, with MRL, ``lightretriever.v-d<dim>``.
Table 1 (query-encoding speed) is the measure job ``lightretriever.speed``.

Training data are the decontam stage's output: LightRetriever trains only on the training questions
that survived SimHash decontamination against its own evaluation sets (config key ``decontam``).
"""
from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import read_docids, write_docids
from harness.config import fragment_defaults
from harness.datasets import Query, store
from harness.errors import ConfigError, DataError
from harness.methods.base import NOT_TRAINING, Context, training_keys, wants_gpu
from harness.plan import Job, Ref
from harness.progress import batches

SCHEMA = "lightretriever.schema.yaml"
DEFAULTS = fragment_defaults(__file__, SCHEMA)
NAME = "lightretriever"
LM_DIR = "lm"
INFO_FILE = "lightretriever.json"
DENSE_DIR, SPARSE_DIR, SPARSE_NPZ = "dense", "sparse", "sparse.npz"
PROMPT = "Instruct: {task}\nQuery: "
#: keys of the section that never change a trained model
NOT_MODEL = ("variant_datasets", "instructions", "hybrid_weights", "impact_scale", "sparse_topk", "variants",
             "variant_overrides", "variant_systems", "speed")
SYSTEM_KINDS = ("base", "dense", "sparse", "hybrid")


# --------------------------------------------------------------------------------------------
# settings


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.lightretriever with defaults; a variant: ``variant_overrides`` then its own settings."""
    sec = cfg["methods"][NAME]
    s = {**copy.deepcopy(DEFAULTS), **copy.deepcopy(dict(sec))}
    s["speed"] = {**DEFAULTS["speed"], **(sec.get("speed") or {})}
    if variant is None:
        return s
    if variant not in (s["variants"] or {}):
        raise ConfigError(f"unknown LightRetriever variant {variant!r}; methods.{NAME}.variants defines: "
                          f"{', '.join(s['variants'] or {}) or '(none)'}")
    s.update(copy.deepcopy(s["variant_overrides"] or {}))
    s.update(copy.deepcopy(s["variants"][variant]))
    return s


def instruction_for(s: Mapping[str, Any], dataset: str) -> str | None:
    """The task instruction of ``dataset`` (None when the model is trained without instructions)."""
    return _instruction(s, dataset) if s["instruction"] else None


def _instruction(s: Mapping[str, Any], dataset: str) -> str:
    try:
        return s["instructions"][dataset]
    except KeyError:
        raise ConfigError(f"methods.{NAME}.instructions has no instruction for dataset {dataset!r}",
                          fix=f"add methods.{NAME}.instructions.{dataset}: '<task>' (App. A.4 lists the paper's)") from None


def check(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    """Config errors that the schema cannot see: every training and evaluation set known and
    instructed, on the right side of ``decontam``, a variant's systems possible."""
    from harness.decontam import report as hdecontam

    where = f"methods.{NAME}"
    evals = list(s["datasets"]) + list(s["variant_datasets"] or [])
    for key in list(s["train_datasets"]) + evals:
        if key not in cfg["datasets"]:
            raise ConfigError(f"{where}: unknown dataset {key!r}; config key datasets defines: {', '.join(cfg['datasets'])}")
        _instruction(s, key)
    train, test = hdecontam.plan(cfg)
    on_train = {(cfg["datasets"][q.key]["id"], q.split) for q in train}
    on_test = {(cfg["datasets"][q.key]["id"], q.split) for q in test}
    for key in s["train_datasets"]:
        if (cfg["datasets"][key]["id"], "train") not in on_train:
            raise ConfigError(f"{where}.train_datasets: {key} (train split) is not on the training side of config key "
                              "decontam; LightRetriever trains on decontaminated sets only",
                              fix=f"add {key}:train to decontam.train")
    for key in dict.fromkeys(evals):
        if (cfg["datasets"][key]["id"], "test") not in on_test:
            raise ConfigError(f"{where}: evaluation set {key} is not on the test side of config key decontam",
                              fix=f"add {key} to decontam.test")
    for v, kinds in (s["variant_systems"] or {}).items():
        if v not in (s["variants"] or {}):
            raise ConfigError(f"{where}.variant_systems: {v!r} is not a variant ({', '.join(s['variants'] or {})})")
        if "hybrid" in kinds and not {"dense", "sparse"} <= set(kinds):
            raise ConfigError(f"{where}.variant_systems.{v}: hybrid needs dense and sparse")
    w = s["hybrid_weights"]
    if not sum(w) > 0:
        raise ConfigError(f"{where}.hybrid_weights: {w} sum to 0", fix="e.g. [0.7, 0.3]")


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in sorted(s) if k not in NOT_MODEL + NOT_TRAINING}


def _torch(s: Mapping[str, Any]):
    import torch

    torch.set_num_threads(int(s.get("torch_threads", 2)))
    return torch


# --------------------------------------------------------------------------------------------
# the model


def token_vectors(model: Any, prompt_ids: Sequence[int], token_ids: Sequence[int], eos_id: int, **kw: Any):
    """[len(token_ids), hidden]: row i is the last hidden state at the final [eos] of ``prompt_ids +
    [token_ids[i], eos_id]`` (Eq. 3). Decoders pack many tokens per forward pass with App. A.5's block
    attention mask and position ids; bidirectional encoders run the separate sequences (a block mask
    cannot reproduce them there). Gradients flow (training); wrap in ``torch.no_grad`` to cache.
    See :func:`harness.models.lr_ops.token_vectors`."""
    from harness.models import lr_ops

    return lr_ops.token_vectors(model, prompt_ids, token_ids, eos_id, **kw)


class LightModel:
    """The backbone with its LM head, its tokenizer, and the encoders of every side."""

    def __init__(self, lm: Any, tok: Any, s: Mapping[str, Any]) -> None:
        from harness.models import lr_ops

        self.lm, self.tok, self.s = lm, tok, dict(s)
        self.base = lm.base_model if not hasattr(lm, "get_base_model") else lm.get_base_model().base_model
        self.causal = lr_ops.is_causal(self.base)
        if self.causal:
            self.bos, self.eos = tok.bos_token_id, tok.eos_token_id
        else:
            self.bos, self.eos = tok.cls_token_id, tok.sep_token_id
        if self.eos is None:
            raise ConfigError(f"backbone {s['backbone']!r}: its tokenizer has no end-of-sequence token for EOS pooling")
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos

    # -- loading
    @classmethod
    def from_backbone(cls, cfg: Mapping[str, Any], s: Mapping[str, Any]) -> LightModel:
        from harness.models import backbones

        path, spec = backbones.resolve(cfg, s["backbone"])
        lm = _load_lm(path, spec)
        tok = backbones.load_tokenizer(cfg, s["backbone"])
        if s.get("lora"):
            from peft import LoraConfig, get_peft_model

            lo = s["lora"]
            lm = get_peft_model(lm, LoraConfig(r=int(lo.get("r", 16)), lora_alpha=float(lo.get("alpha", 32)),
                                               lora_dropout=float(lo.get("dropout", 0.1)),
                                               target_modules=lo.get("target_modules", "all-linear")))
        return cls(lm, tok, s)

    @classmethod
    def load(cls, folder: Path) -> LightModel:
        from transformers import AutoTokenizer

        folder = Path(folder)
        info = json.loads((folder / INFO_FILE).read_text())
        lm = _load_lm(str(folder / LM_DIR), {"source": "path:"})
        tok = AutoTokenizer.from_pretrained(folder / LM_DIR)
        model = cls(lm, tok, info["settings"])
        model.lm.eval()
        return model

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        lm = self.lm.merge_and_unload() if hasattr(self.lm, "merge_and_unload") else self.lm
        lm.save_pretrained(folder / LM_DIR)
        self.tok.save_pretrained(folder / LM_DIR)
        (folder / INFO_FILE).write_text(json.dumps({"settings": train_signature(self.s) | {"backbone": self.s["backbone"]},
                                                    "causal": self.causal}, indent=1, default=str))

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
        torch = _torch(self.s)
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
        from harness.models.lr_ops import eos_pool

        return eos_pool(h.float(), mask)

    def sparse_vectors(self, h, mask, n_prefix: int):
        """Max-pooled log-saturated LM-head logits over the body positions (the prefix, the final
        [eos] and padding excluded), [B, V] (fused projection-then-max)."""
        import torch

        from harness.models import lr_ops

        transform, w, b = self.head()
        keep = mask.clone().bool()
        keep[:, :n_prefix] = False
        keep[torch.arange(h.shape[0], device=h.device), mask.sum(1) - 1] = False
        return lr_ops.sparse_doc_vector(transform(h), w, b, keep).float()

    def token_vectors(self, prompt: Sequence[int], tokens: Sequence[int]):
        return token_vectors(self.base, list(prompt), list(tokens), self.eos)

    def light_mean(self, prompt: Sequence[int], rows: Sequence[Sequence[int]], *, embedding: bool = False):
        """Mean of the rows' token vectors (cached-token encoder, or the input embedding table), normalised."""
        import torch

        uniq = sorted({t for r in rows for t in r})
        if not uniq:
            return torch.zeros(len(rows), self.hidden, device=self.base.device)
        if embedding:
            table = self.base.get_input_embeddings()(torch.tensor(uniq, device=self.base.device))
        else:
            table = self.token_vectors(prompt, uniq)
        pos = {t: i for i, t in enumerate(uniq)}
        out = []
        for r in rows:
            out.append(table[[pos[t] for t in r]].mean(0) if r else torch.zeros(self.hidden, device=table.device))
        return torch.nn.functional.normalize(torch.stack(out).float(), dim=-1)

    def counts(self, rows: Sequence[Sequence[int]], *, binary: bool = False):
        import torch

        v = torch.zeros(len(rows), self.vocab, device=self.base.device)
        for i, r in enumerate(rows):
            if r:
                idx = torch.tensor(r, device=v.device)
                v[i].index_add_(0, idx, torch.ones(len(r), device=v.device))
        return v.clamp(max=1.0) if binary else v

    def cache_table(self, instruction: str | None, *, batch_size: int = 256):
        """All V token vectors of one instruction in an EmbeddingBag(mode="mean") (serving, §2.2)."""
        import torch

        from harness.models import lr_ops

        prompt = self.prompt_ids(instruction)
        with torch.inference_mode():
            if self.s["dense_query"] == "embedding":
                vecs = self.base.get_input_embeddings().weight.detach().float().clone()
            else:
                vecs = token_vectors(self.base, prompt, list(range(self.vocab)), self.eos,
                                     batch_size=batch_size).float()
        return lr_ops.build_table(vecs)


def _load_lm(path: str, spec: Mapping[str, Any]):
    """The backbone with its LM head: AutoModelForCausalLM for decoders, AutoModelForMaskedLM otherwise."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    from harness.models.backbones import _hub_kwargs

    kw = _hub_kwargs(spec.get("source", ""))
    conf = AutoConfig.from_pretrained(path, **kw)
    decoder = conf.model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3") or bool(
        getattr(conf, "is_decoder", False))
    cls = AutoModelForCausalLM if decoder else AutoModelForMaskedLM
    return cls.from_pretrained(path, **kw)


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


# --------------------------------------------------------------------------------------------
# training


def training_groups(s: Mapping[str, Any], sets: Mapping[str, tuple[list[Query], Mapping[str, list[str]]]],
                    seed: int) -> list[tuple[str, list[tuple[Query, list[str]]]]]:
    """Batches of ``batch_size`` questions, each drawn from one training set (the authors' sampler),
    in a seeded order; every question once per pass."""
    rng = random.Random(seed)
    groups = []
    bs = int(s["batch_size"])
    for key, (queries, negs) in sets.items():
        ex = [(q, list(negs.get(q.id, []))) for q in queries]
        rng.shuffle(ex)
        groups += [(key, ex[i:i + bs]) for i in range(0, len(ex) - 1, bs) if len(ex[i:i + bs]) >= 2]
    rng.shuffle(groups)
    return groups


def kept_training_queries(decontam_dir: Path, key: str, data_dir: Path, queries: Sequence[Query],
                          cfg: Mapping[str, Any]) -> list[Query]:
    """``queries`` (the train split of ``key``, read from ``data_dir``) minus those the decontam stage dropped."""
    from harness.decontam import report as hdecontam

    train, _ = hdecontam.plan(cfg)
    did = cfg["datasets"][key]["id"]
    names = [q.name for q in train if cfg["datasets"][q.key]["id"] == did and q.split == "train"]
    path = Path(decontam_dir) / "train" / f"{names[0]}.jsonl"
    if not path.exists():
        raise DataError(f"{path} does not exist: the decontam stage wrote no training file for {names[0]}",
                        fix="re-run rule decontam")
    from harness.io import iter_jsonl

    kept = {str(r["id"]) for r in iter_jsonl(path)}
    out = []
    for q in queries:
        if q.id in kept:
            if not q.gold:
                raise DataError(f"{data_dir}/queries-train.jsonl: question {q.id} has no gold passage to train on")
            out.append(q)
    return out


def train(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from dataclasses import replace

    from harness import train as loop
    from harness.io import iter_jsonl

    _torch(s)   # thread count
    seed = int(cfg["seed"])
    loop.set_seed(seed)
    sets, docs, counts = {}, {}, {}
    for key in s["train_datasets"]:
        split = store.read_queries(inputs[f"data_{key}"], "train")
        qs = kept_training_queries(inputs["decontam"], key, inputs[f"data_{key}"], split, cfg)
        total = len(split)
        qs = loop.subsample(qs, s["max_train_questions"], seed)
        negs = {r["id"]: r["negatives"] for r in iter_jsonl(inputs[f"negatives_{key}"])}
        sets[key] = (qs, negs)
        docs[key] = {d.id: d for d in store.iter_corpus(inputs[f"data_{key}"])}
        counts[key] = {"train_questions": total, "after_decontam_and_sample": len(qs)}
    groups = training_groups(s, sets, seed)
    if not groups:
        raise DataError(f"methods.{NAME}: no training batch: the training sets have fewer than 2 questions")
    model = LightModel.from_backbone(cfg, s)
    ts = loop.TrainSettings.from_config(s)
    ts = replace(ts, batch_size=1, min_batch=1)   # one example = one pre-formed single-set batch
    tau, tau_s = float(s["temperature"]), float(s["sparse_temperature"])
    n_hard = int(s["hard_negatives"])
    n_per = 1 + n_hard
    prompts = {k: model.prompt_ids(instruction_for(s, k)) for k in sets}
    doc_prefix = model.prompt_ids(None)
    doc_lists = {k: list(v) for k, v in docs.items()}

    def step_fn(batch, step, rng):
        key, group = batch[0]
        D = docs[key]
        golds = {q.gold[0] for q, _ in group}
        cols = []   # query i's positive at column i * n_per, then its hard negatives
        for q, negs in group:
            pool = [d for d in negs if d not in golds][:n_hard]
            while len(pool) < n_hard:   # fewer mined negatives than asked: random passages
                r = rng.choice(doc_lists[key])
                if r not in golds and r not in pool:
                    pool.append(r)
            cols += [q.gold[0], *pool]
        qs = [q for q, _ in group]
        drows = model.ids([_doc_text(D[p]) for p in cols], int(s["p_max_len"]))
        qrows = model.ids([q.text for q in qs], int(s["q_max_len"]))
        dh, dmask = model.forward(doc_prefix, drows)
        d_full = model.eos_pool(dh, dmask)
        qh, qmask = model.forward(prompts[key], qrows)
        q_full = model.eos_pool(qh, qmask)
        parts: dict[str, float] = {}
        base = q_full @ d_full.T
        loss = contrastive(base / tau, n_per)
        parts["base"] = float(loss.detach())
        # light dense
        if s["dense_query"] == "full":
            q_light = q_full
        else:
            q_light = model.light_mean(prompts[key], qrows, embedding=s["dense_query"] == "embedding")
        d_dense = model.light_mean(doc_prefix, drows) if s["dense_doc"] == "light" else d_full
        light = q_light @ d_dense.T
        l_dense = contrastive(light / tau, n_per)
        parts["dense"] = float(l_dense.detach())
        loss = loss + l_dense
        # light sparse
        if s["sparse_query"] == "full":
            q_sp = model.sparse_vectors(*model.forward(doc_prefix, qrows), len(doc_prefix))
        else:
            q_sp = model.counts(qrows, binary=s["sparse_query"] == "binary")
        if s["sparse_doc"] == "full":
            d_sp = model.sparse_vectors(dh, dmask, len(doc_prefix))
        else:
            d_sp = model.counts(drows)
        sparse = q_sp @ d_sp.T
        l_sparse = contrastive(sparse / tau_s, n_per)
        reg_on = d_sp if s["sparse_doc"] == "full" else (q_sp if s["sparse_query"] == "full" else None)
        if reg_on is not None and s["flops_weight"]:
            reg = float(s["flops_weight"]) * ramp(step, int(s["flops_ramp_steps"])) * flops(reg_on)
            l_sparse = l_sparse + reg
            parts["flops"] = float(reg.detach())
        parts["sparse"] = float(l_sparse.detach())
        loss = loss + l_sparse
        if s["kl"]:
            l_kl = kl_align(light / tau, base / tau) + kl_align(sparse / tau_s, base / tau)
            parts["kl"] = float(l_kl.detach())
            loss = loss + l_kl
        for dim in s["mrl_dims"] or []:
            if dim >= model.hidden:
                continue
            a, b = mrl(q_full, d_full, dim)
            c, e = mrl(q_light, d_dense, dim)
            loss = loss + contrastive(a @ b.T / tau, n_per) + contrastive(c @ e.T / tau, n_per)
        return loss, parts

    params = [p for p in model.lm.parameters() if p.requires_grad]
    info = loop.train_loop(groups, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=[model.lm])
    if not all(np.isfinite(info["losses"])):
        raise DataError(f"methods.{NAME}: the training loss became non-finite", fix="lower lr")
    return {"steps": info["steps"], "batches": len(groups), "seconds": info["seconds"],
            "loss_first": info["loss_first"], "loss_last": info["loss_last"], "training_sets": counts,
            "backbone": s["backbone"], "trainable_parameters": int(sum(p.numel() for p in params)),
            "lora": s.get("lora"), **{k: info[k] for k in info if k.endswith(("_first", "_last"))}}


# --------------------------------------------------------------------------------------------
# jobs (harness/plan.py)


def variants(s: Mapping[str, Any]) -> list[str]:
    return list(s["variants"] or {})


def model_id(v: str | None) -> str:
    return NAME if v is None else f"{NAME}.{v}"


def systems_of(s: Mapping[str, Any], v: str | None) -> dict[str, str]:
    """kind -> system id of one model's search job (hybrid: the fusion job's system)."""
    if v is None:
        return {"dense": NAME, "base": f"{NAME}.base", "sparse": f"{NAME}.sparse", "hybrid": f"{NAME}.hybrid"}
    kinds = (s["variant_systems"] or {}).get(v, list(SYSTEM_KINDS))
    p = f"{NAME}.{v}"
    ids = {"dense": p, "base": f"{p}-base", "sparse": f"{p}-sparse", "hybrid": f"{p}-hybrid"}
    return {k: ids[k] for k in SYSTEM_KINDS if k in kinds}


def eval_datasets(s: Mapping[str, Any], variant: bool) -> list[str]:
    """The evaluation sets of the main model (``datasets``) or of a variant (``variant_datasets``, else ``datasets``)."""
    if not variant or s["variant_datasets"] is None:
        return list(s["datasets"])
    return list(s["variant_datasets"])


def needs_sparse(s: Mapping[str, Any], v: str | None) -> bool:
    return "sparse" in systems_of(s, v)


def _train_keys(cfg: Mapping[str, Any], s: Mapping[str, Any], v: str | None) -> tuple[str, ...]:
    m = f"methods.{NAME}"
    keys = training_keys(cfg, NAME, exclude=NOT_MODEL)
    keys += tuple(f"{m}.instructions.{k}" for k in s["train_datasets"])
    keys += tuple(f"datasets.{k}" for k in s["train_datasets"])
    if v is not None:
        keys += (f"{m}.variant_overrides", f"{m}.variants.{v}")
        if s["backbone"] != cfg["methods"][NAME]["backbone"]:
            keys += (f"backbones.{s['backbone']}",)
    return keys


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test", variant: str | None = None
               ) -> Job:
    """Every system of one model on ``dataset`` but the hybrid (one model load, one cache table)."""
    s = settings(cfg, variant)
    mid = model_id(variant)
    kinds = systems_of(settings(cfg), variant)
    systems = [kinds[k] for k in ("dense", "base", "sparse") if k in kinds]
    if variant is None and split == "test":
        systems += [f"{NAME}.topk{k}" for k in s["sparse_topk"]]
    if variant is not None and split == "test":
        systems += [f"{mid}-d{d}" for d in s["mrl_dims"] or []]
    m = f"methods.{name}"
    return Job("search", mid if split == "test" else f"{mid}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), systems=tuple(systems) if split == "test" else (mid,),
               params={"split": split, "variant": variant},
               keys=("evaluate.depth", f"{m}.instructions.{dataset}", f"{m}.impact_scale", f"{m}.sparse_topk",
                     f"{m}.q_max_len", f"{m}.variant_systems"),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", mid),
                       "index": Ref("index", mid, dataset)})


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models (main and variants), their indexes of any dataset, one search job per model and
    evaluation set, the hybrid fusions, and the Table 1 speed job."""
    from harness.fusion import fusion_job

    s = settings(cfg)
    check(cfg, s)
    m, gpu = f"methods.{name}", wants_gpu(cfg, name)
    data = {}
    for key in s["train_datasets"]:
        data[f"data_{key}"] = Ref("data", dataset=key)
        data[f"negatives_{key}"] = Ref("negatives", dataset=key)
    data["decontam"] = Ref("decontam")
    jobs: list[Job] = []
    for v in [None, *variants(s)]:
        vs = settings(cfg, v)
        mid = model_id(v)
        jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"variant": v}, inputs=data,
                        keys=_train_keys(cfg, vs, v), mem_mb=8000))
        jobs.append(Job("index", mid, name, "build", gpu=gpu, params={"variant": v, "sparse": needs_sparse(s, v)},
                        keys=(f"{m}.index", f"{m}.p_max_len", f"{m}.impact_scale", f"{m}.sparse_topk",
                              f"{m}.variant_systems"),
                        inputs={"data": Ref("data"), "model": Ref("model", mid)}, mem_mb=8000))
        kinds = systems_of(s, v)
        for d in eval_datasets(s, variant=v is not None):
            jobs.append(search_job(cfg, name, d, variant=v))
            if "hybrid" in kinds:
                wd, wsp = (float(x) for x in s["hybrid_weights"])
                jobs.append(fusion_job(kinds["hybrid"], name, d, [kinds["dense"], kinds["sparse"]], "interpolate",
                                       keys=(f"{m}.hybrid_weights",), alpha=wd / (wd + wsp)))
    jobs += _fig5_jobs(cfg, s)
    sp = s["speed"]
    if sp["dataset"]:
        if sp["dataset"] not in cfg["datasets"]:
            raise ConfigError(f"{m}.speed.dataset: unknown dataset {sp['dataset']!r}")
        bs = [f"{NAME}.speed-bs{b}" for b in sp["batch_sizes"]]
        shapes = [f"{NAME}.speed-{sh}-bs{b}" for sh in sp["shapes"] for b in sp["shape_batch_sizes"]]
        jobs.append(Job("measure", f"{NAME}.speed", name, "measure_speed", sp["dataset"], systems=(*bs, *shapes),
                        keys=(f"{m}.speed", f"{m}.instructions", f"{m}.q_max_len"), mem_mb=12000,
                        inputs={"data": Ref("data", dataset=sp["dataset"]), "model": Ref("model", NAME)}))
    return jobs


def fig5_points(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, list[tuple[int, str]]]:
    """Figure 5's points: dense = [(dims, system)] of the MRL variant (its full size last), sparse =
    [(top-k, system)] of the main model; empty lists where the profile has neither."""
    mrl_v = next((v for v in variants(s) if settings(cfg, v)["mrl_dims"]), None)
    dense = []
    if mrl_v is not None and "dense" in systems_of(s, mrl_v):
        vs = settings(cfg, mrl_v)
        dense = [(int(d), f"{model_id(mrl_v)}-d{d}") for d in sorted(vs["mrl_dims"])] + [(0, model_id(mrl_v))]
    sparse = [(int(k), f"{NAME}.topk{k}") for k in sorted(s["sparse_topk"] or [])]
    return {"dense": dense, "sparse": sparse}


def _fig5_jobs(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> list[Job]:
    """One measure job per dataset where both Figure 5 curves are searched."""
    pts = fig5_points(cfg, s)
    if not pts["dense"] and not pts["sparse"]:
        return []
    vds = eval_datasets(s, variant=True)
    out = []
    for d in [x for x in s["datasets"] if x in vds]:
        runs = {f"run_{sid}": Ref("system", sid, d) for _, sid in pts["dense"] + pts["sparse"]}
        n = max(len(pts["dense"]), len(pts["sparse"]))
        out.append(Job("measure", f"{NAME}.fig5", NAME, "measure_fig5", d,
                       systems=tuple(f"{NAME}.fig5-{kind}-{i}" for kind in ("dense", "sparse") for i in range(n)
                                     if i < len(pts[kind])),
                       keys=("evaluate.ir_measures",), params={"points": {k: [list(p) for p in v] for k, v in pts.items()}},
                       inputs={"data": Ref("data", dataset=d), **runs}))
    return out


# --------------------------------------------------------------------------------------------
# steps


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    v = job.params.get("variant")
    return {"variant": v, **train(ctx.cfg, settings(ctx.cfg, v), inputs, out)}


def _doc_text(d) -> str:
    return f"{d.title} {d.text}".strip()


def encode_corpus(model: LightModel, s: Mapping[str, Any], texts: Sequence[str], *, sparse: bool):
    """Dense document vectors [N, H] (normalised) and, with ``sparse``, the sparse vectors as a CSR
    matrix [N, V] (float32, before quantisation); counts truncated documents."""
    import scipy.sparse as sps

    torch = _torch(s)
    bs = int(s["encode_batch_size"])
    maxlen = int(s["p_max_len"])
    prefix = model.prompt_ids(None)
    dense, rows_sp = [], []
    full_ids = model.tok([" " + t for t in texts], add_special_tokens=False)["input_ids"]
    truncated = sum(len(x) > maxlen for x in full_ids)
    all_rows = [list(x[:maxlen]) for x in full_ids]
    table = model.cache_table(None) if s["dense_doc"] == "light" else None
    with torch.inference_mode():
        for i in batches(len(texts), bs, "encode corpus (lightretriever)", "doc"):
            rows = all_rows[i:i + bs]
            if s["dense_doc"] == "light" and not (sparse and s["sparse_doc"] == "full"):
                h = mask = None
            else:
                h, mask = model.forward(prefix, rows)
            if s["dense_doc"] == "light":
                from harness.models.lr_ops import query_vector

                dense.append(torch.nn.functional.normalize(query_vector(table, rows).float(), dim=-1).cpu().numpy())
            else:
                dense.append(model.eos_pool(h, mask).cpu().numpy())
            if sparse:
                if s["sparse_doc"] == "full":
                    v = model.sparse_vectors(h, mask, len(prefix))
                else:
                    v = model.counts(rows)
                rows_sp.append(sps.csr_matrix(v.cpu().numpy()))
    dense_m = np.concatenate(dense).astype(np.float32) if dense else np.zeros((0, model.hidden), np.float32)
    sp_m = sps.vstack(rows_sp).tocsr() if rows_sp else None
    return dense_m, sp_m, truncated


def impacts(row, scale: float) -> dict[str, int]:
    """A sparse row as Lucene impacts {token id: round(w * scale)} (zero weights dropped)."""
    out = {}
    for j, w in zip(row.indices.tolist(), row.data.tolist()):
        q = round(w * scale)
        if q > 0:
            out[str(j)] = q
    return out


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Encode the corpus once: the dense faiss index (``dense/``) and, where the model's sparse side is
    searched, the Lucene impact index (``sparse/``) and the float sparse matrix (``sparse.npz``)."""
    import scipy.sparse as sps

    from harness.indexes import parse_spec
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.indexes.lucene import LUCENE_DIR, build_impact
    from harness.meta import folder_bytes

    s = settings(ctx.cfg)
    model = LightModel.load(inputs["model"])
    ms = model.s
    docs = list(store.iter_corpus(inputs["data"]))
    sparse = bool(job.params.get("sparse"))
    t0 = time.perf_counter()
    dense, sp, truncated = encode_corpus(model, {**s, **{k: ms[k] for k in ("dense_doc", "sparse_doc")}},
                                         [_doc_text(d) for d in docs], sparse=sparse)
    t_enc = time.perf_counter() - t0
    ids = [d.id for d in docs]
    spec = s["index"]
    index = DenseFaissIndex.build(parse_spec(spec)[1], dense)
    (out / DENSE_DIR).mkdir()
    index.save(out / DENSE_DIR)
    write_docids(out / DENSE_DIR, ids)
    info: dict[str, Any] = {"spec": spec, "documents": len(docs), "dim": int(dense.shape[1]),
                            "truncated_documents": truncated, "p_max_len": int(s["p_max_len"]),
                            "encode_seconds": round(t_enc, 3), "dense_bytes": int(index.nbytes)}
    if sparse:
        scale = float(s["impact_scale"])
        t1 = time.perf_counter()
        (out / SPARSE_DIR).mkdir()
        n = build_impact(((i, impacts(sp[r], scale)) for r, i in enumerate(ids)), out / SPARSE_DIR / LUCENE_DIR)
        write_docids(out / SPARSE_DIR, ids)
        sps.save_npz(out / SPARSE_NPZ, sp.astype(np.float32))
        nnz = np.diff(sp.indptr)
        info.update({"sparse_spec": "lucene:impact", "sparse_documents_indexed": n,
                     "sparse_build_seconds": round(time.perf_counter() - t1, 3),
                     "sparse_terms_mean": float(nnz.mean()) if len(nnz) else 0.0,
                     "sparse_bytes": folder_bytes(out / SPARSE_DIR)})
    return info


def _topk_rows(sp, k: int):
    """Each row's k largest weights (Figure 5's sparsity control)."""
    import scipy.sparse as sps

    sp = sp.tocsr()
    rows, cols, vals = [], [], []
    for i in range(sp.shape[0]):
        a, b = sp.indptr[i], sp.indptr[i + 1]
        d, c = sp.data[a:b], sp.indices[a:b]
        if len(d) > k:
            keep = np.argpartition(-d, k - 1)[:k]
            d, c = d[keep], c[keep]
        rows += [i] * len(d)
        cols += c.tolist()
        vals += d.tolist()
    return sps.csr_matrix((vals, (rows, cols)), shape=sp.shape, dtype=np.float32)


def _dense_hits(docvecs: np.ndarray, qvecs: np.ndarray, docids: Sequence[str], qids: Sequence[str], k: int):
    from harness.artifacts import hits_from_rows
    from harness.indexes.faiss_dense import DenseFaissIndex

    scores, rows = DenseFaissIndex.build("Flat", docvecs).search(qvecs, min(k, len(docids)))
    return hits_from_rows(docids, qids, scores, rows)


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """The dense (light), full-size baseline and sparse runs of one model (+ Figure 5's top-k / MRL runs)."""
    from harness.artifacts import hits_from_rows, write_run_with_meta
    from harness.indexes import parse_spec
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.indexes.lucene import LUCENE_DIR, LuceneIndex
    from harness.models.lr_ops import query_vector

    torch = _torch(ctx.mcfg)
    v = job.params.get("variant")
    s = settings(ctx.cfg)
    split = job.params.get("split", "test")
    queries = store.read_queries(inputs["data"], split)
    qids, k = [q.id for q in queries], int(ctx.cfg["evaluate"]["depth"])
    model = LightModel.load(inputs["model"])
    ms = model.s
    instr = instruction_for({**s, "instruction": ms["instruction"]}, str(job.dataset))
    kinds = {kk: sid for kk, sid in systems_of(s, v).items() if sid in job.systems} if split == "test" else \
        {"dense": job.systems[0]}
    qrows = model.ids([q.text for q in queries], int(s["q_max_len"]))
    empty = sum(1 for r in qrows if not r)
    if empty:
        print(f"WARNING: {job.dataset}: {empty} quer{'y' if empty == 1 else 'ies'} with no token after tokenisation: "
              "zero vectors (no hits)")
    index = DenseFaissIndex.load(inputs["index"] / DENSE_DIR, parse_spec(s["index"])[1])
    docids = read_docids(inputs["index"] / DENSE_DIR, expect=index.ntotal)
    meta = {"dataset": job.dataset, "split": split, "depth": k, "instruction": instr, "empty_queries": empty}
    info: dict[str, Any] = {"queries": len(queries), "empty_queries": empty}
    qvec_light = None
    if "dense" in kinds:
        t0 = time.perf_counter()
        if ms["dense_query"] == "full":
            qvec_light = _full_queries(model, s, instr, qrows)
        else:
            table = model.cache_table(instr)
            t1 = time.perf_counter()
            with torch.inference_mode():
                qvec_light = torch.nn.functional.normalize(query_vector(table, qrows).float(), dim=-1).numpy()
            info["table_seconds"], info["lookup_seconds"] = round(t1 - t0, 3), round(time.perf_counter() - t1, 4)
        scores, rows = index.search(qvec_light, k)
        write_run_with_meta(out / f"{kinds['dense']}.trec", hits_from_rows(docids, qids, scores, rows),
                            system=kinds["dense"], meta={**meta, "query": ms["dense_query"], "doc": ms["dense_doc"],
                                                         "seconds": round(time.perf_counter() - t0, 3)})
    if "base" in kinds:
        t0 = time.perf_counter()
        qf = _full_queries(model, s, instr, qrows)
        scores, rows = index.search(qf, k)
        write_run_with_meta(out / f"{kinds['base']}.trec", hits_from_rows(docids, qids, scores, rows),
                            system=kinds["base"], meta={**meta, "query": "full", "doc": ms["dense_doc"],
                                                        "seconds": round(time.perf_counter() - t0, 3)})
    qsp = None
    if "sparse" in kinds:
        t0 = time.perf_counter()
        qsp = _sparse_queries(model, s, qrows)
        scale = float(s["impact_scale"])
        enc = {q: (impacts(qsp[i], scale) if ms["sparse_query"] == "full" else
                   {str(j): int(w) for j, w in zip(qsp[i].indices.tolist(), qsp[i].data.tolist())})
               for i, q in enumerate(qids)}
        hits = LuceneIndex(inputs["index"] / SPARSE_DIR / LUCENE_DIR, "impact").search(enc, k)
        write_run_with_meta(out / f"{kinds['sparse']}.trec", hits, system=kinds["sparse"],
                            meta={**meta, "instruction": None, "query": ms["sparse_query"], "doc": ms["sparse_doc"],
                                  "impact_scale": scale, "seconds": round(time.perf_counter() - t0, 3)})
    docs_sp = docvecs = None   # Figure 5's inputs, loaded once for all its systems
    for system in job.systems:
        if f"{NAME}.topk" in system:        # Figure 5: documents' top-k sparse terms, exact dot products
            import scipy.sparse as sps

            kk = int(system.rsplit("topk", 1)[1])
            docs_sp = docs_sp if docs_sp is not None else sps.load_npz(inputs["index"] / SPARSE_NPZ)
            qsp = qsp if qsp is not None else _sparse_queries(model, s, qrows)
            scores = (qsp @ _topk_rows(docs_sp, kk).T).toarray()
            write_run_with_meta(out / f"{system}.trec", _score_hits(scores, docids, qids, k), system=system,
                                meta={**meta, "instruction": None, "doc_topk": kk,
                                      "note": "float weights, exact sparse dot products (scipy)"})
        elif "-d" in system and system.startswith(model_id(v) + "-d"):   # MRL dims
            dim = int(system.rsplit("-d", 1)[1])
            docvecs = docvecs if docvecs is not None else index.index.reconstruct_n(0, index.ntotal)
            qvec_light = qvec_light if qvec_light is not None else _full_queries(model, s, instr, qrows)
            a = docvecs[:, :dim] / np.maximum(np.linalg.norm(docvecs[:, :dim], axis=1, keepdims=True), 1e-12)
            b = qvec_light[:, :dim] / np.maximum(np.linalg.norm(qvec_light[:, :dim], axis=1, keepdims=True), 1e-12)
            write_run_with_meta(out / f"{system}.trec", _dense_hits(a, b, docids, qids, k), system=system,
                                meta={**meta, "dim": dim, "note": "light dense, first dim dims re-normalised (MRL)"})
    return info


def _score_hits(scores: np.ndarray, docids: Sequence[str], qids: Sequence[str], k: int):
    out = {}
    for i, q in enumerate(qids):
        row = scores[i]
        top = np.argsort(-row, kind="stable")[:k]
        out[q] = [(docids[j], float(row[j])) for j in top if row[j] > 0]
    return out


def _full_queries(model: LightModel, s: Mapping[str, Any], instr: str | None, qrows) -> np.ndarray:
    torch = _torch(s)
    prompt = model.prompt_ids(instr)
    bs = int(s["encode_batch_size"])
    out = []
    with torch.inference_mode():
        for i in range(0, len(qrows), bs):
            h, mask = model.forward(prompt, qrows[i:i + bs])
            out.append(model.eos_pool(h, mask).cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, model.hidden), np.float32)


def _sparse_queries(model: LightModel, s: Mapping[str, Any], qrows):
    """Query sparse vectors (CSR [n, V]): counts, binary, or (Table 4 'Qry Full') the LM-head vector."""
    import scipy.sparse as sps

    torch = _torch(s)
    mode = model.s["sparse_query"]
    if mode == "full":
        prefix = model.prompt_ids(None)
        out = []
        with torch.inference_mode():
            for i in range(0, len(qrows), int(s["encode_batch_size"])):
                rows = [r or [model.eos] for r in qrows[i:i + int(s["encode_batch_size"])]]
                h, mask = model.forward(prefix, rows)
                out.append(sps.csr_matrix(model.sparse_vectors(h, mask, len(prefix)).cpu().numpy()))
        return sps.vstack(out).tocsr()
    data, rows, cols = [], [], []
    for i, r in enumerate(qrows):
        for t, c in Counter(r).items():
            rows.append(i)
            cols.append(t)
            data.append(1.0 if mode == "binary" else float(c))
    return sps.csr_matrix((data, (rows, cols)), shape=(len(qrows), model.vocab), dtype=np.float32)


def measure_fig5(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 5: nDCG@10 against the dense dims kept (MRL variant) and the sparse terms kept per
    document (top-k of the main model), evaluated as the evaluate stage does; points smallest first
    (``lightretriever.fig5-dense-<i>``, ``-sparse-<i>``) and ``fig5.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.evaluate.cli import evaluate_run
    from harness.io import write_json

    measure, d = "nDCG@10", str(job.dataset)
    curves: dict[str, list[tuple[int, float]]] = {}
    for kind, pts in job.params["points"].items():
        for i, (k, sid) in enumerate(pts):
            res = evaluate_run(ctx.cfg, d, inputs[f"run_{sid}"] / f"{sid}.trec")
            if measure not in res["measures"]:
                raise ConfigError(f"Figure 5 needs {measure} in evaluate.ir_measures (dataset {d})")
            size = int(k) if k else None
            v = res["measures"][measure]
            curves.setdefault(kind, []).append((size or 0, v))
            what = (f"{measure} of {sid}: " + (f"first {size} dims (MRL)" if kind == "dense" and size else
                                               "all dims" if kind == "dense" else f"top {size} terms per document"))
            write_json(out / f"{NAME}.fig5-{kind}-{i}.json", {
                "system": f"{NAME}.fig5-{kind}-{i}", "dataset": d, "source_system": sid,
                "values": {"ndcg10": {"value": v, "unit": "ratio", "device": "cpu", "what": what},
                           "topk": {"value": float(size or 0), "unit": "count", "device": "cpu",
                                    "what": "dims or terms kept (0: all dims)"}}})
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for kind, pts in curves.items():
        xs = [k for k, _ in pts if k] or []
        ys = [v for k, v in pts if k]
        if xs:
            ax.plot(xs, ys, marker="o", label=f"light {kind} (top-k {'dims' if kind == 'dense' else 'terms'})")
        full = [v for k, v in pts if not k]
        if full:
            ax.axhline(full[0], ls="--", lw=0.8, color="grey", label="light dense, all dims")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("top-k")
    ax.set_ylabel(measure)
    ax.set_title(f"LightRetriever Figure 5, {ctx.cfg['profile']}, {d}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig5.png", dpi=120)
    plt.close(fig)
    return {"figures": ["fig5.png"]}


# --------------------------------------------------------------------------------------------
# Table 1: query-encoding speed


def measure_speed(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table 1 on this machine: tokenisation, the full-size encoder and the cached lookup of the trained
    model over the dataset's test queries cycled to ``speed.queries``, per batch size; then the same
    for randomly initialised paper-sized shapes (``speed.shapes``) where memory allows. What each timer
    holds: harness/bench/lr_query_speed.py."""
    from harness.bench import lr_query_speed as lq
    from harness.io import write_json

    s = settings(ctx.cfg)
    sp = s["speed"]
    torch = _torch(s)
    texts = [q.text for q in store.read_queries(inputs["data"], "test")]
    n = int(sp["queries"])
    model = LightModel.load(inputs["model"])
    instr = instruction_for({**s, "instruction": model.s["instruction"]}, str(job.dataset))
    table = model.cache_table(instr)
    d = str(job.dataset)
    note = (f"{len(texts):,} test queries of {d} cycled to {n:,}" if len(texts) < n else f"first {n:,} test queries of {d}")
    from harness.meta import resolve_device

    dev, why = resolve_device("cuda")
    gpu = dev != "cpu"
    no_gpu = why or "no GPU"
    bandwidth = lq.copy_bandwidth()

    def write(system: str, row: Mapping[str, Any], shape: str) -> None:
        vals: dict[str, Any] = {}
        not_run: dict[str, str] = {}
        spec = [("tokenize_seconds", "tokenize_s", "s", "tokenising all queries in batches (padding, tensors)", "cpu"),
                ("full_cpu_seconds", "full_cpu_s", "s", (f"full-size encoder ({shape}): forward + EOS pooling, "
                                                         "tokenisation outside the timer"), "cpu"),
                ("full_gpu_seconds", "full_gpu_s", "s", f"full-size encoder ({shape}) on the GPU", "cuda"),
                ("light_cpu_seconds", "light_cpu_s", "s", "EmbeddingBag(mean) over pre-tokenised ids", "cpu"),
                ("light_gpu_seconds", "light_gpu_s", "s", "EmbeddingBag(mean) on the GPU", "cuda"),
                ("speedup_cpu", "speedup_cpu", "x", "full-size CPU seconds / lookup CPU seconds", "cpu"),
                ("speedup_gpu", "speedup_gpu", "x", "full-size GPU seconds / lookup GPU seconds", "cuda"),
                ("speedup_gpu_vs_cpu_lookup", "speedup_gpu_vs_light_cpu", "x",
                 "full-size GPU seconds / lookup CPU seconds (the paper's No-GPU speedup)", "cuda"),
                ("bandwidth_bound_seconds", "bound_s", "s", "bytes of token vectors read / measured copy bandwidth",
                 "cpu"),
                ("light_over_bound", "light_over_bound", "ratio", "lookup CPU seconds / bandwidth bound", "cpu")]
        for name, key, unit, what, dev in spec:
            value = row.get(key)
            if value is None:
                kind = row.get("full_gpu_kind") if "gpu" in key else None
                not_run[name] = ("out of GPU memory" if kind == "OOM" else no_gpu if dev == "cuda" and not gpu
                                 else "not measured")
                continue
            e = {"value": float(value), "unit": unit, "device": dev, "what": what}
            if (key.startswith("full_cpu") or key == "speedup_cpu") and row.get("full_cpu_kind") == "projected":
                e["kind"] = "projected"
                e["what"] += (f" (timed on {row.get('full_cpu_queries_timed')} of {row.get('queries')} queries, "
                              "scaled linearly)")
            if key.startswith(("full_gpu", "speedup_gpu")) and row.get("full_gpu_kind") == "projected":
                e["kind"] = "projected"
            vals[name] = e
        write_json(out / f"{system}.json", {"system": system, "dataset": d, "values": vals, "not_run": not_run,
                                            "queries_note": note, "shape": shape, "batch_size": row.get("batch_size"),
                                            "tokens": row.get("tokens"), "bytes_read": row.get("bytes_read"),
                                            "bandwidth_bytes_per_s": row.get("bandwidth")})

    kw = {"batch_sizes": tuple(sp["batch_sizes"]), "n_queries": n, "max_len": int(s["q_max_len"]) + 32,
          "full_budget_s": sp["full_budget_s"], "gpu": gpu, "bandwidth": bandwidth}
    for row in lq.speed_table(texts, tokenizer=model.tok, full_model=model.base, table=table, **kw):
        write(f"{NAME}.speed-bs{row['batch_size']}", row, s["backbone"])
        print(f"batch {row['batch_size']}: tokenise {row['tokenize_s']:.3f} s, full {row['full_cpu_s']:.3f} s "
              f"({row['full_cpu_kind']}), lookup {row['light_cpu_s']:.4f} s, x{row['speedup_cpu']:.0f}")
    skipped = {}
    for shape in sp["shapes"]:
        ok, why = lq.fits_in_memory(lq.PAPER_SHAPES[shape], torch.float32)
        if not ok:
            skipped[shape] = why
            for b in sp["shape_batch_sizes"]:
                write(f"{NAME}.speed-{shape}-bs{b}", {"batch_size": b}, f"{shape}: not run, {why}")
            continue
        conf = lq.PAPER_SHAPES[shape]
        big = lq.random_model(shape)
        rtable = lq.random_table(conf.vocab_size, conf.hidden_size)
        for row in lq.speed_table(texts, tokenizer=model.tok, full_model=big, table=rtable,
                                  **{**kw, "batch_sizes": tuple(sp["shape_batch_sizes"])}):
            write(f"{NAME}.speed-{shape}-bs{row['batch_size']}", row, f"{shape} shape, random weights")
        del big, rtable
    return {"queries": n, "queries_note": note, "shapes_not_run": skipped, "bandwidth_bytes_per_s": bandwidth}
