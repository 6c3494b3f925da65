"""The paper rehearsal's backbones (#28): the committed model configurations are the released
models' shapes, ``config:`` sources build them with random weights, and their offline tokenizers
have the configurations' vocabulary sizes."""
from __future__ import annotations

import math

import pytest

from harness.errors import ConfigError, ResourceError
from harness.models import backbones as bb

# the released models' parameter counts (their model cards / papers), with the LM head where untied
PUBLISHED_PARAMS = {
    "bert-base-uncased": 110e6, "spanbert-base-cased": 108e6, "tct-colbert": 110e6, "contriever": 110e6,
    "llama32-1b": 1.24e9, "llama32-3b": 3.21e9, "llama31-8b": 8.03e9, "mistral-7b": 7.25e9,
    "qwen25-1b5": 1.54e9, "qwen25-3b": 3.09e9, "qwen25-7b": 7.62e9, "gemma-2-2b": 2.61e9,
}


def test_every_committed_configuration_has_its_released_models_parameter_count():
    from transformers import AutoModel, AutoModelForCausalLM

    assert {p.stem for p in bb.CONFIG_DIR.glob("*.json")} == set(PUBLISHED_PARAMS)
    for name, published in PUBLISHED_PARAMS.items():
        config = bb.load_config(name, name)
        cls = AutoModel if config.model_type == "bert" else AutoModelForCausalLM
        n = bb.parameters_of(config, cls)
        assert abs(n - published) / published < 0.02, (name, n, published)


def test_paper_profile_backbones_all_have_a_configuration():
    import yaml

    paper = yaml.safe_load((bb.CONFIG_DIR.parents[0] / "profiles" / "paper.yaml").read_text())
    default = yaml.safe_load((bb.CONFIG_DIR.parents[0] / "default.yaml").read_text())
    hub = {n for n, s in {**default["backbones"], **paper["backbones"]}.items() if s["source"].startswith("hub:")}
    rehearsal = yaml.safe_load((bb.CONFIG_DIR.parents[0] / "profiles" / "rehearsal.yaml").read_text())["backbones"]
    assert hub <= set(rehearsal), hub - set(rehearsal)
    for name, spec in rehearsal.items():
        assert spec["source"].startswith("config:") and "tokenizer" in spec, name
        bb.config_path(name, spec["source"].partition(":")[2])


def test_uncased_wordpiece_is_bert_base_uncaseds_own_tokenizer():
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained(str(bb._package_dir("cognition", "model")))
    tok = bb.synthetic_tokenizer("wordpiece-uncased", 30522)
    assert len(tok) == 30522
    for text in ("Where was Marie Curie born? In Warsaw.", "The 21,015,324 passages of DPR's Wikipedia."):
        assert tok(text)["input_ids"] == real(text)["input_ids"]


@pytest.mark.parametrize("kind,size", [("wordpiece-cased", 28996), ("byte-bpe", 128256), ("byte-bpe", 32768)])
def test_offline_tokenizers_have_the_configurations_size_and_round_trip(kind, size):
    tok = bb.synthetic_tokenizer(kind, size)
    assert len(tok) == size
    ids = tok("Where was Marie Curie born?")["input_ids"]
    assert ids and max(ids) < size
    if kind == "byte-bpe":
        text = "Where was Marie Curie born? Ünïcode ok."
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
        assert tok.eos_token_id is not None and tok.pad_token_id is not None
        assert bb.synthetic_tokenizer(kind, size).get_vocab() == tok.get_vocab()  # deterministic


def test_config_source_builds_random_weights_of_the_configured_shape(tmp_path):
    import json

    shape = json.loads((bb.CONFIG_DIR / "bert-base-uncased.json").read_text())
    shape.update(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)  # fast, same kind
    (tmp_path / "bert-2l.json").write_text(json.dumps(shape))
    cfg = {"backbones": {"b": {"source": f"config:{tmp_path / 'bert-2l.json'}", "tokenizer": "wordpiece-uncased"}}}
    model = bb.load_encoder(cfg, "b")
    assert type(model).__name__ == "BertModel" and model.config.hidden_size == 64
    assert model.config.num_hidden_layers == 2 and model.embeddings.word_embeddings.weight.shape == (30522, 64)
    assert float(model.embeddings.word_embeddings.weight.detach().std()) > 0.01  # random, not zeros
    assert type(bb.load_mlm(cfg, "b")).__name__ == "BertForMaskedLM"
    assert len(bb.load_tokenizer(cfg, "b")) == model.config.vocab_size


def test_a_backbone_without_an_mlm_head_gets_its_word_embeddings_as_a_tied_head_in_both_loaders(tmp_path):
    """``has_mlm_head: false`` (all-MiniLM-L6-v2): load_mlm (VDR/SVDR) and load_lm (LightRetriever) give the
    same head, the input embeddings as output projection behind an identity transform; load_mlm refused
    such a backbone before, so a vocabulary-space method could not start from the strongest encoder."""
    import json

    import torch

    shape = json.loads((bb.CONFIG_DIR / "bert-base-uncased.json").read_text())
    shape.update(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    (tmp_path / "bert-1l.json").write_text(json.dumps(shape))
    cfg = {"backbones": {"b": {"source": f"config:{tmp_path / 'bert-1l.json'}", "tokenizer": "wordpiece-uncased",
                               "has_mlm_head": False}}}
    for model in (bb.load_mlm(cfg, "b"), bb.load_lm(cfg, "b")):
        head = model.cls.predictions
        assert torch.equal(head.transform.dense.weight, torch.eye(32))
        assert float(head.transform.dense.bias.abs().sum()) == 0.0
        assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    cfg["backbones"]["b"]["has_mlm_head"] = True  # a shipped head is left as loaded (here: random)
    assert not torch.equal(bb.load_mlm(cfg, "b").cls.predictions.transform.dense.weight, torch.eye(32))


def test_config_source_refuses_a_model_that_does_not_fit_naming_what_it_needs(monkeypatch):
    from harness import cost

    monkeypatch.setattr(cost, "mem_available", lambda: 1024)
    cfg = {"backbones": {"big": {"source": "config:llama31-8b", "tokenizer": "byte-bpe"}}}
    with pytest.raises(ResourceError, match=r"big.*needs \d+\.\d GiB.*GiB available"):
        bb.load_encoder(cfg, "big")


def test_config_source_errors_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match="configs/backbones/.*bert-base-uncased"):
        bb.load_encoder({"backbones": {"x": {"source": "config:bert-large"}}}, "x")
    with pytest.raises(ConfigError, match="tokenizer"):
        bb.load_tokenizer({"backbones": {"x": {"source": "config:bert-base-uncased"}}}, "x")


def test_the_rehearsal_plans_every_job_of_the_paper_profile():
    """Same jobs (stage, id, dataset) as the paper profile: only backbones' weights, data slices and
    counts change, never which jobs exist (a variant that became its main model's twin would vanish)."""
    from harness import plan
    from harness.config import load_config

    paper = plan.get(load_config(["configs/profiles/paper.yaml"]))
    rehearsal = plan.get(load_config(["configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml"]))
    assert set(paper.jobs) == set(rehearsal.jobs)
    for key, job in paper.jobs.items():  # the paper's batch sizes, lengths, precision and index specs stay
        values = rehearsal.values(rehearsal.jobs[key])
        for k, v in paper.values(job).items():
            if k.rsplit(".", 1)[-1] in ("batch_size", "p_max_len", "q_max_len", "precision", "index", "lora", "device"):
                assert values.get(k) == v, (key, k)


def test_the_rehearsals_speed_job_keeps_the_papers_queries_and_batches_and_times_a_batch_of_each():
    """Table 1 in the rehearsal: the paper's query count, batch sizes and shapes; the full-size encoder
    timed within a budget (the first queries of one batch per size after the warm-up on a CPU),
    projected to all queries."""
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])["methods"]["lightretriever"]["speed"]
    rehearsal = load_config(["configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml"])
    speed = rehearsal["methods"]["lightretriever"]["speed"]
    assert paper["full_budget_s"] is None and speed["full_budget_s"] is not None and speed["full_budget_s"] <= 60
    # the paper's whole batches; the rehearsal's first queries of each (at most its smallest batch)
    assert paper["full_sub_batch"] is None and 1 <= speed["full_sub_batch"] <= min(paper["batch_sizes"])
    for key, value in paper.items():
        assert key in ("full_budget_s", "full_sub_batch") or speed[key] == value, key


def test_the_rehearsals_synthetic_index_keeps_the_papers_densities_on_fewer_passages():
    """SVDR Table 5 in the rehearsal: the paper profile's densities and batch sizes, over few enough
    passages to run on a CPU node (the paper profile's 10M need 62 GiB)."""
    from harness.config import load_config
    from harness.methods.vdr.synthetic import synthetic_bytes

    paper = load_config(["configs/profiles/paper.yaml"])["methods"]["svdr"]["synthetic"]
    rehearsal = load_config(["configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml"])["methods"]["svdr"]
    syn = rehearsal["synthetic"]
    assert {k: v for k, v in syn.items() if k != "passages"} == {k: v for k, v in paper.items() if k != "passages"}
    assert syn["passages"] < paper["passages"]
    assert synthetic_bytes(paper["passages"], paper["densities"], paper["base_density"]) > 60 * 2**30
    assert synthetic_bytes(syn["passages"], syn["densities"], syn["base_density"]) < 4 * 2**30


def test_the_speed_job_books_a_gpu_and_the_host_memory_of_its_paper_shape():
    """LightRetriever Table 1's GPU columns are timed only where its job has a GPU, which a cluster gives
    a job that books one: the paper profile's books it (the rehearsal found it booked none), and host
    memory for the Mistral-7B shape built in float32 beside the 7.1 GiB the rehearsal measured it
    holding without the shape (the booking was the method's 12,000 MB)."""
    from harness import plan
    from harness.config import load_config
    from harness.methods.lightretriever import speed as lq
    from harness.workflow import booked_mem_mb

    cfg = load_config(["configs/profiles/paper.yaml"])
    job = plan.pin(cfg).job("measure", "lightretriever.speed", "msmarco")
    assert job.gpu and cfg["methods"]["lightretriever"]["speed"]["shapes"] == ["mistral-7b"]
    rest = booked_mem_mb(cfg, job) * 2**20 - int(7.1 * 2**30)
    assert lq.fits_in_memory(lq.PAPER_SHAPES["mistral-7b"], available=rest)[0]
    assert not lq.fits_in_memory(lq.PAPER_SHAPES["mistral-7b"], available=12000 * 2**20 - int(7.1 * 2**30))[0]


def test_the_estimate_names_the_jobs_it_does_not_price_with_their_benchmark_seconds(tmp_path):
    """The evaluate, table and single bookkeeping jobs of the DAG record no cost: the estimate counts them
    and quotes Snakemake's benchmark files of the rehearsal (never a train or search job's)."""
    from harness import estimate, plan
    from harness.config import load_config

    cfg = load_config(["configs/profiles/paper.yaml"])
    tests = [j for j in plan.pin(cfg).concrete("search") if j.params.get("split", "test") == "test"]
    assert plan.pin(cfg).evaluated() == tests
    assert f"the DAG's {len(tests)} evaluate jobs" in estimate.unpriced_line(cfg, tmp_path)
    assert estimate.unpriced_line(cfg, tmp_path).endswith("none timed yet")
    for rel, s in (("evaluate/dpr-nq.tsv", 0.75), ("tables/svdr-1.tsv", 3.25), ("learning.tsv", 1.0),
                   ("train/dpr.tsv", 500.0), ("search/dpr-nq.tsv", 9.0)):
        f = tmp_path / "benchmarks" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"s\th:m:s\n{s}\t0:00:00\n")
    assert estimate.unpriced_line(cfg, tmp_path).endswith("time 3 of them at 0.8-3.2 s each")


def test_a_variant_trained_in_other_sub_batches_is_compared_with_its_own(tmp_path):
    """The estimate's note on GradCache sub-batches compares with the variant's own setting where it sets
    one (LightRetriever's main model takes 64 in the paper profile, its 8B variant 8)."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    # QCR's sub-batch is its chunk_size (the paper profile's 128), recorded as the job's grad_cache_chunk
    cases = (("lightretriever.llama-8b", 4, 8), ("qcr.grid-b1k1", 8, 128))
    for job, measured, _ in cases:
        folder = tmp_path / "models" / job
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"kind": "model", "job": job, "grad_cache_chunk": measured,
                                                      "cost": cost.record("train", {"steps": 2}, 30.0)}))
    rows = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, other_datasets=False, siblings=False)
    for job, measured, want in cases:
        row, = [r for r in rows if r["stage"] == "train" and r["job"] == job]
        assert f"(measured in GradCache sub-batches of {measured}, the profile uses {want})" in row["how"], job


def test_cost_record_prices_each_stages_unit_and_the_estimate_projects_it(tmp_path, capsys):
    """A rehearsal job's cost per unit x the paper profile's count of units (dataset cards, the
    method's epochs and batch size): DPR's 40 epochs x ceil(58,880 / 128) steps, NQ's 21,015,324
    passages, NQ test's 3,610 questions; every row says projected."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)  # a job begins: no step timed (steps timed by other tests' loops are forgotten)
    rec = cost.record("train", {"steps": 2}, 30.0)
    assert rec["unit"] == "step" and rec["seconds_per_unit"] == 15.0 and rec["host_peak_bytes"] > 0
    assert cost.record("index", {"documents": 500}, 10.0)["seconds_per_unit"] == 20.0  # per 1,000 documents
    # an index job that marked the end of its start-up pays that once; the rest is per 1,000 documents
    _marked_job_pays_its_startup_once("index", {"documents": 2000}, 2)
    cost.allow_fallbacks(False)  # the next job starts unmarked
    assert "pricing" not in cost.record("index", {"documents": 500}, 10.0)
    assert "seconds_per_unit" not in cost.record("measure", {}, 5.0)
    for folder, meta in {
        "models/dpr": {"kind": "model", "job": "dpr", "cost": cost.record("train", {"steps": 2}, 30.0),
                       "grad_cache_chunk": 32},  # trained in sub-batches where the profile uses one graph
        "indexes/dpr/nq": {"kind": "index", "job": "dpr", "dataset": "nq", "bytes": 1000, "documents": 500,
                           "cost": cost.record("index", {"documents": 500}, 10.0)},
        "runs/nq/dpr": {"kind": "run", "job": "dpr", "dataset": "nq", "bytes": 32 * 2**10,
                        "inputs": {"index": "results/rehearsal/indexes/dpr/nq"},  # as recorded where it ran
                        "cost": cost.record("search", {"queries": 32}, 3.2)},
        "runs/nq/bm25": {"kind": "run", "job": "bm25", "dataset": "nq", "cost": cost.record("search", {"queries": 32}, 32.0)},
    }.items():
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "meta.json").write_text(json.dumps(meta))
    every = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, other_datasets=False, siblings=False)
    rows = {r["stage"]: r for r in every if r["job"] == "dpr"}
    assert rows["train"]["seconds"] == 15.0 * 40 * 460 and rows["train"]["kind"] == "projected"
    assert "(measured in GradCache sub-batches of 32, the profile trains in one graph" in rows["train"]["how"]
    assert "GradCache" not in rows["index"]["how"]
    assert abs(rows["index"]["seconds"] - 20.0 * 21015.324) < 1e-6
    assert abs(rows["search"]["seconds"] - 0.1 * 3610) < 1e-6
    # disk: an index grows with its documents (1,000 bytes for 500 -> NQ's 21,015,324), a run file with its
    # queries (32 KiB for 32 -> 3,610); a model is as measured (none here); nothing measured, nothing projected
    assert abs(rows["index"]["disk_gib"] * 2**30 - 1000 * 21015324 / 500) < 2**30 * 1e-3
    assert abs(rows["search"]["disk_gib"] - 3610 * 2**10 / 2**30) < 1e-3 and rows["train"]["disk_gib"] is None
    # DPR's jobs book a GPU in the paper profile, BM25's search does not: GPU-hours and CPU hours apart;
    # a GPU job measured on a CPU (no peak GPU memory: the rehearsal's device fallback) is not priced in
    # GPU-hours but in that CPU's hours, said apart
    t = estimate.totals(every, 4)
    dpr_h = (15.0 * 40 * 460 + 20.0 * 21015.324 + 0.1 * 3610) / 3600
    assert t["gpu_hours"] == 0 and abs(t["gpu_jobs_on_cpu_hours"] - dpr_h) < 1e-6 and t["gpu_jobs_on_cpu"] == 3
    on_gpu = [dict(r, gpu_peak_gib=1.0) if r["job"] == "dpr" else r for r in every]
    t = estimate.totals(on_gpu, 4)
    assert abs(t["gpu_hours"] - dpr_h) < 1e-6 and t["gpu_jobs_on_cpu"] == 0
    assert abs(t["cpu_hours"] - 1.0 * 3610 / 3600) < 1e-6 and t["gpu_wall_hours"] == t["gpu_hours"] / 4
    assert any(line.startswith("GPU jobs measured on a CPU (device_fallback): 3 job(s)")
               for line in estimate.summary(estimate.totals(every, 4)))
    assert t["disk_jobs"] == 2 and t["projected"] == t["jobs"] == 4
    # a query measured against the slice's 500-document index costs more against NQ's 21M: a lower bound, said
    assert rows["search"]["bound"] == "lower" and "each searched 500 documents here, 21,015,324 in the profile" \
        in rows["search"]["how"] and t["lower_bounds"] == 1 and "bound" not in rows["index"]
    # the papers' own figures stand beside the job they are about: DPR's index of NQ, not its run or training
    assert rows["index"]["papers_own"].startswith("BPR Table 1: DPR's index of the 21M passages, 64.6 GB")
    assert rows["search"]["papers_own"] == rows["train"]["papers_own"] == ""
    (tmp_path / "logs" / "train").mkdir(parents=True)
    (tmp_path / "logs" / "train" / "bpr.log").write_text("train: 0%\nerror: train bpr: out of memory at this shape (x)\n")
    (tmp_path / "logs" / "train" / "svdr.log").write_text("train svdr: done in 3.0s\n")
    assert estimate.failures(tmp_path) == [("logs/train/bpr.log", "error: train bpr: out of memory at this shape (x)")]
    # a job that died without the harness's error line (killed, or libgomp ended it) is listed with its
    # log's last line; a finished index job and a data job (which prints no done line) are not
    (tmp_path / "logs" / "index").mkdir()
    (tmp_path / "logs" / "data").mkdir()
    (tmp_path / "logs" / "index" / "dpr-nq.log").write_text("index dpr on nq: done in 728.5s\n")
    (tmp_path / "logs" / "data" / "nq.log").write_text("nq: 2067 documents\n")
    (tmp_path / "logs" / "train" / "vdr.log").write_text(
        "train: 50%\n\nlibgomp: Thread creation failed: Resource temporarily unavailable\n\n")
    died = dict(estimate.failures(tmp_path))
    assert set(died) == {"logs/train/bpr.log", "logs/train/vdr.log"}
    assert died["logs/train/vdr.log"].startswith("ended without the harness's error line") \
        and died["logs/train/vdr.log"].endswith("last line: libgomp: Thread creation failed: Resource temporarily unavailable")
    (tmp_path / "logs" / "train" / "vdr.log").unlink()
    assert estimate.main(["--config", "configs/profiles/paper.yaml", "--measured", str(tmp_path), "--no-ledger"]) == 0
    out = capsys.readouterr().out
    assert "projected" in out and "40 epochs x ceil(58,880 / 128)" in out and "1 job(s) of the rehearsal failed or did not finish" in out
    # DPR's index and search and BM25's search, measured on NQ, project those jobs on the profile's other
    # datasets too (23 rows), and their searches are lower bounds as NQ's is
    assert ("jobs measured: 4 (and 23 index, search and measure jobs projected from the same job measured on another dataset; 3 "
            "variant and @init jobs from the per-unit cost of the job they vary") in out  # dpr@init: train, index, search
    assert "9 jobs (0.4 h) are lower bounds" in out  # dpr@init's search too
    assert "GPU-hours; on 8 GPUs at best" in out and "CPU jobs: 4.9 hours of job time" in out and "GiB of artifacts" in out
    # the issue's own command line spells the option as Snakemake does
    assert estimate.main(["--configfile", "configs/profiles/paper.yaml", "--measured", str(tmp_path), "--no-ledger"]) == 0
    assert capsys.readouterr().out == out
    # the rehearsal overlay is what is measured, not a profile to project to: its slices are not the
    # cards' counts (it printed BPR's 2,067-passage index as 1,185 hours)
    from harness.errors import ConfigError
    with pytest.raises(ConfigError, match="profile: rehearsal .* drop configs/profiles/rehearsal.yaml"):
        estimate.main(["--config", "configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml",
                       "--measured", str(tmp_path), "--no-ledger"])


def test_a_measure_job_is_as_measured_and_a_lower_bound(tmp_path):
    """A measure job (BPR's Table 1/2 efficiency) has no unit of work the estimate scales: its seconds
    stand as measured, on the rehearsal's 16 timing questions and slice-sized indexes, so its row says
    so and counts among the lower bounds (it was printed as measured, unqualified)."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    (tmp_path / "metrics/nq/bpr.efficiency").mkdir(parents=True)
    (tmp_path / "metrics/nq/bpr.efficiency/meta.json").write_text(json.dumps(
        {"kind": "metrics", "job": "bpr.efficiency", "dataset": "nq", "cost": cost.record("measure", {}, 120.0)}))
    [row] = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)
    assert (row["stage"], row["seconds"], row["bound"]) == ("measure", 120.0, "lower")
    assert row["how"].startswith("not scaled: as measured on the rehearsal's slices and counts")
    assert estimate.totals([row], 8)["lower_bounds"] == 1


def test_a_search_over_the_training_questions_is_projected_to_that_split(tmp_path):
    """BPR's run over NQ's training questions (the reader's input) counts NQ's 58,880 training
    questions, not its 3,610 test ones (it did, before)."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    (tmp_path / "runs/nq/bpr.train").mkdir(parents=True)
    (tmp_path / "runs/nq/bpr.train/meta.json").write_text(json.dumps(
        {"kind": "run", "job": "bpr.train", "dataset": "nq", "cost": cost.record("search", {"queries": 906}, 90.6)}))
    [row] = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)
    assert row["how"].startswith("58,880 train queries") and abs(row["seconds"] - 0.1 * 58880) < 1e-6


def test_device_fallback_runs_on_the_cpu_and_records_it_or_fails_naming_the_setting():
    import torch

    from harness import cost
    from harness.train import resolve_device

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: nothing to fall back from")
    cost.allow_fallbacks(False)
    with pytest.raises(ConfigError, match="device_fallback"):
        resolve_device("cuda")
    cost.allow_fallbacks(True)
    assert resolve_device("cuda") == "cpu" and resolve_device("cuda") == "cpu"
    assert cost.fallbacks() == ["device cuda -> cpu: torch sees no CUDA device"]
    cost.allow_fallbacks(False)
    assert cost.fallbacks() == []


def test_bf16_on_a_cpu_without_bf16_matmul_falls_back_to_fp32_only_where_allowed(monkeypatch):
    """A bf16 job on a CPU that emulates bf16 matmuls (no AVX512-BF16/AMX) trains in fp32 where the job
    may fall back (the rehearsal), recorded; otherwise it keeps bf16; a CPU with bf16 keeps it."""
    from harness import cost
    from harness import train as loop

    ts = loop.TrainSettings(epochs=1, batch_size=1, lr=1e-3, precision="bf16")
    monkeypatch.setattr(loop, "cpu_has_bf16", lambda: False)
    cost.allow_fallbacks(True)
    assert loop._accelerator(ts, "cpu").mixed_precision == "no"
    assert cost.fallbacks() == ["precision bf16 -> fp32: this CPU has no bf16 matmul (oneDNN)"]
    cost.allow_fallbacks(False)
    assert loop._accelerator(ts, "cpu").mixed_precision == "bf16" and cost.fallbacks() == []
    monkeypatch.setattr(loop, "cpu_has_bf16", lambda: True)
    cost.allow_fallbacks(True)
    assert loop._accelerator(ts, "cpu").mixed_precision == "bf16" and cost.fallbacks() == []
    cost.allow_fallbacks(False)


def test_a_job_too_large_for_the_machine_fails_naming_its_memory():
    import torch

    from harness import cost

    avail = cost.mem_available()
    if avail is None:
        pytest.skip("no /proc/meminfo")
    big = int(avail * 0.95)  # past the cap (a tenth of what is available is left to others); untouched,
    try:  # the kernel's overcommit grants it uncapped
        torch.empty(big, dtype=torch.uint8)
    except RuntimeError:
        pytest.skip("the kernel refuses this allocation even uncapped (strict overcommit)")
    with pytest.raises(ResourceError, match=r"train big: out of memory at this shape .*GiB at its peak.*GiB available"):
        with cost.memory_guard("train big"):
            torch.empty(big, dtype=torch.uint8)
    # a method with GradCache sub-batches: the fix names its setting, not a smaller batch
    from harness.methods.base import sub_batch_key

    with pytest.raises(ResourceError, match=r"set methods\.dpr\.grad_cache_chunk to train the same batch") as err:
        with cost.memory_guard("train dpr", sub_batch=sub_batch_key("dpr")):
            torch.empty(big, dtype=torch.uint8)
    assert "shrink its batch" not in str(err.value)
    assert sub_batch_key("qcr") == "methods.qcr.chunk_size" and sub_batch_key("reader") == "reader.sub_batch" \
        and sub_batch_key("densephrases") == "methods.densephrases.grad_cache_chunk"
    assert torch.empty(big, dtype=torch.uint8).numel() == big  # the cap is lifted afterwards
    with cost.memory_guard("train small"):
        assert torch.ones(1000).sum() == 1000


_NEAR_THE_CAP = """
import mmap, os, resource, sys
import faiss, numba, numpy as np, torch
from harness import cost

@numba.njit(parallel=True)
def total(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s

total.compile("float64(float64[::1])")  # compiled, never run: its threads do not exist yet
numba.np.ufunc.parallel._launch_threads()
x = np.random.rand(256, 16).astype(np.float32)
index = faiss.IndexFlatIP(16)
index.add(x)
t = torch.empty(1 << 22)  # (empty: a fill would run torch's parallel loop)
with cost.memory_guard("train x"):
    room = resource.getrlimit(resource.RLIMIT_AS)[0] - cost._vm_size()
    fill = mmap.mmap(-1, room - (2 << 20))  # address space, not memory: 2 MiB left, less than a thread's stack
    {"faiss": lambda: index.search(x, 3), "torch": lambda: t.add_(1), "numba": lambda: total(np.ones(1000))}[sys.argv[1]]()
print("ran", sys.argv[1])
"""


@pytest.mark.parametrize("runtime", ["torch", "numba", "faiss"])
def test_a_parallel_loop_first_run_near_the_memory_cap_does_not_end_the_job_without_a_word(runtime, tmp_path):
    """The rehearsal's VDR train job died at its second step with "libgomp: Thread creation failed",
    no error line: its first numba loop ran near the guard's address-space cap, where OpenMP could not
    map a new thread's stack and ended the process. The guard starts each runtime's threads before it
    sets the cap (harness.threads), so a loop first run at 2 MiB from the cap runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from harness import cost

    if cost.mem_available() is None:
        pytest.skip("no /proc/meminfo: the guard sets no cap")
    script = tmp_path / "near_the_cap.py"
    script.write_text(_NEAR_THE_CAP)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, str(script), runtime], capture_output=True, text=True, env=env, timeout=300)
    assert "Thread creation failed" not in done.stderr
    assert done.returncode == 0 and f"ran {runtime}" in done.stdout, done.stderr[-2000:]


def test_a_python_thread_the_cap_refuses_is_named_as_memory():
    from harness import cost

    if cost.mem_available() is None:
        pytest.skip("no /proc/meminfo: the guard sets no cap")
    with pytest.raises(ResourceError, match=r"train x: out of memory at this shape \(can't start new thread\)"):
        with cost.memory_guard("train x"):
            raise RuntimeError("can't start new thread")


def test_the_memory_guard_sets_no_cap_on_a_gpu_machine_before_torch_is_loaded(monkeypatch):
    """A job imports torch after its guard begins; on a machine with a GPU the guard must not cap the
    address space then either: CUDA maps the device memory it allocates into that space, and on an H200
    the cap turned a 90 GiB allocation (49 GiB free on the GPU) and a 64 MB host allocation while saving
    (125 GiB free) into out-of-memory errors."""
    import resource
    from pathlib import Path

    from harness import cost

    monkeypatch.setattr(cost, "_cuda_device", lambda: None)  # torch not loaded yet
    before = resource.getrlimit(resource.RLIMIT_AS)
    monkeypatch.setattr(cost, "gpu_present", lambda: True)
    with cost.memory_guard("train lightretriever"):
        assert resource.getrlimit(resource.RLIMIT_AS) == before
    monkeypatch.setattr(cost, "gpu_present", lambda: False)
    if cost.mem_available() is not None:
        with cost.memory_guard("train dpr"):
            assert resource.getrlimit(resource.RLIMIT_AS) != before  # a CPU machine is capped
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    monkeypatch.undo()
    monkeypatch.setattr(Path, "glob", lambda self, pat: iter([Path("/dev/nvidiactl"), Path("/dev/nvidia0")]))
    assert cost.gpu_present()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not cost.gpu_present()  # hidden
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(Path, "glob", lambda self, pat: iter([Path("/dev/nvidiactl"), Path("/dev/nvidia-uvm")]))
    assert not cost.gpu_present()  # control devices alone are no GPU


def test_a_train_job_is_priced_by_its_steady_steps_plus_what_it_pays_once(tmp_path):
    """Two timed steps or more: seconds per step = the median of the steps after the first (the first
    carries CUDA's and the allocator's warm-up), and the rest of the job's seconds (imports, building
    the model, saving) is paid once, not once per step, in the projection."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    for s, first in ((4.0, True), (0.5, False), (0.7, False), (0.6, False)):
        cost.step_timed(s, first=first)
    rec = cost.record("train", {"steps": 4}, 20.0)
    assert rec["pricing"] == "steady" and rec["seconds_per_unit"] == 0.6 and rec["steps_timed"] == 3
    assert rec["fixed_seconds"] == 20.0 - 0.6 * 4 and rec["first_step_seconds"] == 4.0
    (tmp_path / "models" / "dpr").mkdir(parents=True)
    (tmp_path / "models" / "dpr" / "meta.json").write_text(json.dumps({"kind": "model", "job": "dpr", "cost": rec}))
    row, = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)
    assert abs(row["seconds"] - (17.6 + 0.6 * 40 * 460)) < 1e-6  # DPR: 40 epochs x ceil(58,880 / 128) steps
    cost.allow_fallbacks(False)  # a new job starts with no step timed: one step spreads its seconds
    cost.step_timed(4.0, first=True)
    one = cost.record("train", {"steps": 1}, 20.0)
    assert one["seconds_per_unit"] == 20.0 and "fixed_seconds" not in one


def _qcr_stages_recorded(seconds: float):
    """(step seconds, cost record, the rehearsal's QCR schedule) of a train job of ``seconds`` whose four
    stages' steps took an H200's 3.5, 7.3, 20.2 and 64.9 s (one step a stage, as the rehearsal runs)."""
    from harness import cost
    from harness.config import load_config

    cost.allow_fallbacks(False)
    steps = [3.5, 7.3, 20.2, 64.9]
    for i, t in enumerate(steps):
        cost.step_timed(t, first=i == 0)
    ran = load_config(["configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml"])["methods"]["qcr"]["schedule"]
    return steps, cost.record("train", {"steps": 4}, seconds), ran


def test_a_schedule_whose_stages_change_shape_is_priced_stage_by_stage(tmp_path):
    """QCR's paper schedule runs 1,000 steps at each of batch 256, 512, 1,024 and 2,048; the rehearsal
    runs one step of each. The median step (here the 1,024 stage's) would under-price the 2,048 stage
    (on an H200: 3.5, 7.3, 20.2 and 64.9 s), so each stage is priced at its own step."""
    import json

    from harness import estimate
    from harness.config import load_config

    steps, rec, ran = _qcr_stages_recorded(120.0)
    assert rec["each_step_seconds"] == steps and rec["seconds_per_unit"] == 20.2
    (tmp_path / "models" / "qcr").mkdir(parents=True)
    meta = {"kind": "model", "job": "qcr", "cost": rec, "config_values": {"methods.qcr.schedule": ran}}
    (tmp_path / "models" / "qcr" / "meta.json").write_text(json.dumps(meta))
    row, = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)
    fixed = 120.0 - sum(steps)
    assert row["pricing"] == "per stage" and abs(row["seconds"] - (fixed + 1000 * sum(steps))) < 1e-6
    assert "1,000 x 64.9 s (batch 2048)" in row["how"]
    # a run whose training pairs capped its batches (QCR-uns.'s 64 generated queries): each stage's step
    # scaled linearly from the batch it ran to the profile's, and the row a lower bound that says why
    (tmp_path / "models" / "qcr" / "meta.json").write_text(json.dumps({**meta, "batch_capped_at": 64}))
    row, = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)
    want = fixed + 1000 * sum(t * st["batch_size"] / 64 for t, st in zip(steps, ran))
    assert row["pricing"] == "per stage" and abs(row["seconds"] - want) < 1e-6 and row["bound"] == "lower"
    assert "1,000 x 64.9 s x 2,048 / 64 (batch 2048, run at 64)" in row["how"] and "ran at 64, capped" in row["how"]
    from harness.ledger import entry
    assert entry({**meta, "batch_capped_at": 64})["batch_capped_at"] == 64   # the ledger line keeps it
    meta["config_values"]["methods.qcr.schedule"] = [{**st, "batch_size": 128} for st in ran]  # other shapes:
    (tmp_path / "models" / "qcr" / "meta.json").write_text(json.dumps(meta))      # not the paper's stages
    row, = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)
    assert row["pricing"] == "steady" and abs(row["seconds"] - (rec["fixed_seconds"] + 20.2 * 4000)) < 1e-6


def test_a_generator_is_priced_per_passage_of_the_profiles_corpus(tmp_path):
    """QCR-uns. writes its training queries with Gemma-2-2b, one a passage. The rehearsal generates for 64
    passages (about 20 s each on two CPU cores), the paper profile for every MS MARCO passage
    (``generator.max_passages: null``): the generator is priced per passage of that corpus, not once with
    the job's start-up; a profile that generates fewer passages, or writes longer queries, is priced by
    them; a profile's job that generates nothing pays none of it."""
    import json

    from harness import estimate
    from harness.config import load_config

    steps, rec, ran = _qcr_stages_recorded(1400.0)
    gen = {"passages": 64, "seconds": 1280.0, "max_new_tokens": 32, "device": "cpu"}
    meta = {"kind": "model", "job": "qcr.uns", "cost": rec, "config_values": {"methods.qcr.schedule": ran},
            "batch_capped_at": 64, "generator": gen}
    (tmp_path / "models" / "qcr.uns").mkdir(parents=True)
    (tmp_path / "models" / "qcr.uns" / "meta.json").write_text(json.dumps(meta))
    paper = load_config(["configs/profiles/paper.yaml"])
    docs = estimate._documents(paper, "msmarco")
    assert docs == 8_841_823 and paper["methods"]["qcr"]["generator"]["max_passages"] is None
    train = 1400.0 - sum(steps) + 1000 * sum(t * st["batch_size"] / 64 for t, st in zip(steps, ran))
    row, = estimate.estimate(paper, tmp_path, siblings=False)
    assert abs(row["seconds"] - (train - 1280.0 + docs * 20.0)) < 1e-3 and row["bound"] == "lower"
    assert "8,841,823 passages x 20.00 s a passage (measured on 64 passages on cpu)" in row["how"]
    assert "priced once" not in row["how"]
    from harness.ledger import entry
    assert entry(meta)["generator"] == gen   # the ledger line keeps it
    paper["methods"]["qcr"]["generator"] = {**paper["methods"]["qcr"]["generator"], "max_passages": 1000,
                                            "max_new_tokens": 64}
    row, = estimate.estimate(paper, tmp_path, siblings=False)
    assert abs(row["seconds"] - (train - 1280.0 + 1000 * 20.0 * 2)) < 1e-3 and "x 64 / 32 new tokens" in row["how"]
    paper["methods"]["qcr"]["variants"]["uns"] = {**paper["methods"]["qcr"]["variants"]["uns"], "training_data": "crops"}
    row, = estimate.estimate(paper, tmp_path, siblings=False)
    assert abs(row["seconds"] - (train - 1280.0)) < 1e-3 and "generates no queries" in row["how"]


def test_the_memory_guard_leaves_cuda_uncapped_and_names_the_gpus_memory(monkeypatch):
    """Where torch sees a GPU, no address-space cap (CUDA reserves address space beyond the host's
    memory), and a CUDA out-of-memory error becomes one line naming the GPU memory it had."""
    import resource

    from harness import cost
    from harness.errors import ResourceError

    monkeypatch.setattr(cost, "_cuda_device", lambda: "NVIDIA H200")
    monkeypatch.setattr(cost, "_gpu_memory", lambda: (130 * 2**30, 140 * 2**30))
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(ResourceError, match=r"out of GPU memory .* 130\.0 GiB at its peak of the 140\.0 GiB of NVIDIA H200"):
        with cost.memory_guard("train lightretriever"):
            assert resource.getrlimit(resource.RLIMIT_AS) == before
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    seen = iter([None, "NVIDIA H200"])  # torch (and its GPU) loaded only after the guard began, as in a job
    monkeypatch.setattr(cost, "_cuda_device", lambda: next(seen, "NVIDIA H200"))
    with pytest.raises(ResourceError, match="out of GPU memory"):
        with cost.memory_guard("train lightretriever"):
            raise RuntimeError("CUDA out of memory. Tried to allocate 16.00 GiB")
    with pytest.raises(RuntimeError, match="shape mismatch"):  # other errors pass through
        with cost.memory_guard("train dpr"):
            raise RuntimeError("shape mismatch")


TINY_MODELS = ("dpr", "bpr", "vdr", "svdr", "qcr", "lightretriever", "reader", "densephrases")


def test_every_methods_rehearsal_model_trains_on_a_tiny_slice(repo, shared_data, tmp_path):
    """#28 item 4: the rehearsal through the real paper-profile configs (paper.yaml + rehearsal.yaml,
    plus rehearsal-tiny.yaml's smaller counts), every trained method's main model and the reader: the
    papers' architectures with random weights, the data, negatives, decontamination and SVDR's token
    index they read, two optimizer steps each; each job's meta.json says the device it fell back from
    and what it cost. (On the rehearsal's H200 the same jobs ran at the paper's batch sizes.)"""
    import json
    import os
    import subprocess
    import sys

    from harness.config import load_config

    files = [str(repo / "configs/profiles" / f) for f in ("paper.yaml", "rehearsal.yaml", "rehearsal-tiny.yaml")]
    targets = [str(tmp_path / "rehearsal" / "models" / m) for m in TINY_MODELS]
    env = {**os.environ, "HARNESS_DATA_MIRROR": str(shared_data)}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--cores", "2", *targets, "--configfile",
                           *files, "--config", f"results_dir={tmp_path}"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = load_config(files[:2])
    for m in TINY_MODELS:
        meta = json.loads((tmp_path / "rehearsal" / "models" / m / "meta.json").read_text())
        assert meta["steps"] == 2, m
        assert meta["cost"]["seconds"] > 0 and meta["cost"]["unit"] == "step", m
        values = meta["config_values"]
        backbone = (cfg["reader"] if m == "reader" else cfg["methods"][m])["backbone"]
        assert values[f"backbones.{backbone}"]["source"].startswith("config:"), m  # the paper's shape, random weights
        if not meta["hardware"].get("gpu"):
            assert "device cuda -> cpu: torch sees no CUDA device" in meta["fallbacks"], m
    dp = json.loads((tmp_path / "rehearsal" / "models" / "densephrases" / "meta.json").read_text())
    assert dp["hardware"].get("gpu") or "precision fp16 -> fp32: fp16 needs device cuda" in dp["fallbacks"]
    assert dp["grad_cache_chunk"] == 2  # its GradCache path ran (batch 4 in sub-batches of 2 windows)
    rows = (tmp_path / "rehearsal" / "models" / "qcr" / "loss.tsv").read_text().splitlines()
    assert [r.split("\t")[6] for r in rows[1:]] == ["150.0", "250.0"]  # the schedule's stages, K up to the paper's last
    qmeta = json.loads((tmp_path / "rehearsal" / "models" / "qcr" / "meta.json").read_text())
    qp = qmeta["cost"]
    assert qmeta["grad_cache_chunk"] == 1   # its chunk_size, for the estimate's note on sub-batches
    assert qp["probe"]["sub_batches_run"] < qp["probe"]["sub_batches"] and qp["probe"]["projected_seconds"] > 0, qp
    assert len(qp["each_step_seconds"]) == 2   # each stage's step priced with its projected sub-batches
    lr = json.loads((tmp_path / "rehearsal" / "models" / "lightretriever" / "meta.json").read_text())
    assert lr["config_values"]["methods.lightretriever.lora"] == {"r": 16, "alpha": 32, "dropout": 0.1}
    assert lr["grad_cache_chunk"] == 1  # its GradCache path ran (a runtime setting: no hash covers it)
    probe = lr["cost"]["probe"]   # the rehearsal's probe: 2 of each pass's 4 passage sub-batches ran
    assert 0 < probe["sub_batches_run"] < probe["sub_batches"] and probe["projected_seconds"] > 0, probe
    assert lr["cost"]["seconds_per_unit"] > probe["measured_step_seconds"][-1]
    assert "methods.lightretriever.grad_cache_chunk" not in lr["config_values"]
    # a job that held its corpus whole (harness.datasets.store.note_held) books at least that corpus at the
    # paper's scale (NQ's 21M passages: ~24 GiB in Python objects), beside its index where it builds one
    from harness import estimate, plan
    from harness.ledger import job_key, measured_jobs
    from harness.workflow import booked_mem_mb

    paper = load_config(files[:1])
    pp = plan.get(paper)
    holders = []
    measured = {job_key(d): d for d in measured_jobs(tmp_path / "rehearsal")}
    # the shared jobs the models read record their cost too: the hard negatives per training question,
    # the decontamination per 1,000 queries hashed
    assert measured["negatives", "negatives", "nq"]["cost"]["unit"] == "query"
    assert measured["decontam", "decontam", None]["cost"]["unit"] == "1k queries"
    for d in measured.values():
        held = estimate.held_corpora(paper, d["cost"].get("held_corpora"))
        if held is not None and job_key(d) in pp.closure():   # rehearsal-tiny adds jobs of its own (bm25.train)
            job = pp.job(*job_key(d))
            holders.append((f"{job.stage} {job.id}", round(held[0] / 2**30, 1), booked_mem_mb(paper, job) / 1024))
    assert {"train dpr", "train bpr", "train lightretriever", "train qcr"} <= {h[0] for h in holders}, holders
    assert [h for h in holders if h[1] > h[2]] == [], holders


def test_config_source_weights_come_from_the_configs_seed_not_the_jobs_random_stream(tmp_path):
    """A ``config:`` backbone is the same model every time it is built (the config's ``seed``), whatever
    the job drew before, and it leaves the job's random stream where it was; another seed, another model."""
    import json

    import torch

    shape = json.loads((bb.CONFIG_DIR / "bert-base-uncased.json").read_text())
    shape.update(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    (tmp_path / "bert-1l.json").write_text(json.dumps(shape))
    cfg = {"seed": 13, "backbones": {"b": {"source": f"config:{tmp_path / 'bert-1l.json'}", "tokenizer": "wordpiece-uncased"}}}
    torch.manual_seed(0)
    a = bb.load_encoder(cfg, "b")
    after_a = torch.rand(1)
    torch.manual_seed(1)
    torch.rand(5)
    b = bb.load_encoder(cfg, "b")
    assert bb.fingerprint(a) == bb.fingerprint(b) and torch.equal(a.embeddings.word_embeddings.weight,
                                                                  b.embeddings.word_embeddings.weight)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), after_a)  # building drew nothing from the job's stream
    assert bb.fingerprint(bb.load_encoder({**cfg, "seed": 14}, "b")) != bb.fingerprint(a)


@pytest.mark.parametrize("shape", sorted(p.stem for p in bb.CONFIG_DIR.glob("*.json")))
def test_a_config_backbone_skips_torchs_first_draw_and_keeps_transformers_initialisation(shape, tmp_path):
    """Every committed configuration (cut to two narrow layers) built by ``_random``, which skips torch's
    layer initialisation and draws transformers' once (``no_init_weights``, then ``init_weights``), against the
    same configuration built plainly: the same parameters, each constant one (norms, biases) the same
    constant, each random one drawn at the same spread (a parameter transformers' ``post_init`` left
    alone would hold torch.empty's memory: zeros or garbage); torch's initialisation is back afterwards."""
    import json

    import torch

    d = json.loads((bb.CONFIG_DIR / f"{shape}.json").read_text())
    d.update(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=512)
    for key, value in (("num_key_value_heads", 2), ("head_dim", 8)):
        if key in d:
            d[key] = value
    if "layer_types" in d:   # one entry per layer (Gemma 2, Qwen 2.5)
        d["layer_types"] = d["layer_types"][:2]
    (tmp_path / f"{shape}.json").write_text(json.dumps(d))
    spec = {"source": f"config:{tmp_path / f'{shape}.json'}"}
    config = bb.load_config(shape, spec["source"].partition(":")[2])
    cls = bb.lm_class(config)
    built = bb._random(cls, shape, spec, 13)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(13)
        plain = cls.from_config(config)
    got, want = dict(built.named_parameters()), dict(plain.named_parameters())
    assert got.keys() == want.keys() and len(got) > 10
    for name, w in want.items():
        g, w = got[name].detach(), w.detach()
        assert g.shape == w.shape and torch.isfinite(g).all(), name
        if bool((w == w.flatten()[0]).all()):
            assert torch.equal(g, w), name   # a constant: the same constant
        else:
            assert float(g.std()) == pytest.approx(float(w.std()), rel=0.25), name
            assert abs(float(g.mean())) < 3 * float(w.std()) / g.numel() ** 0.5 + 1e-3, name
            assert not torch.equal(g, w), name   # drawn afresh: the skipped draws moved nothing
    layer = torch.nn.Linear(64, 64)   # outside the context torch initialises layers again
    assert float(layer.weight.abs().max()) > 0 and float(layer.weight.abs().max()) <= 1 / 8 + 1e-6


def test_a_lora_model_saves_its_adapter_alone_and_loads_as_the_merged_model_it_trained(tmp_path):
    """LightRetriever with LoRA on a ``config:`` decoder (the rehearsal's Llama shapes, cut down): the
    saved folder holds the adapter, not the model (the merged 8B model would be 32 GB a job); loading
    rebuilds the base from the backbone it names and merges the adapter: the same hidden states as the
    trained model merged in memory. A base whose weights differ (here: another seed) is refused."""
    import json

    import torch

    from harness.errors import DataError
    from harness.methods.lightretriever.model import ADAPTER_DIR, INFO_FILE, LightModel

    shape = json.loads((bb.CONFIG_DIR / "llama32-1b.json").read_text())
    shape.update(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=64, head_dim=8, vocab_size=512)
    (tmp_path / "llama-2l.json").write_text(json.dumps(shape))
    cfg = {"seed": 13, "backbones": {"tiny": {"source": f"config:{tmp_path / 'llama-2l.json'}", "tokenizer": "byte-bpe"}}}
    s = {"backbone": "tiny", "lora": {"r": 4, "alpha": 8, "dropout": 0.0}, "dense_query": "token"}
    model = LightModel.from_backbone(cfg, s)
    with torch.no_grad():  # "training": LoRA's B starts at zero; move every adapter weight
        for name, p in model.lm.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    ids = torch.tensor([[1, 17, 99, 300, 2]])
    folder = tmp_path / "model"
    folder.mkdir()
    model.save(folder)
    model.lm.eval()
    with torch.no_grad():
        want = model.lm.merge_and_unload().model(input_ids=ids).last_hidden_state
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert f"{ADAPTER_DIR}/adapter_model.safetensors" in files
    assert not any(f.endswith(("model.safetensors", ".bin")) and not f.startswith(ADAPTER_DIR) for f in files), files
    loaded = LightModel.load(folder)
    with torch.no_grad():
        got = loaded.base(input_ids=ids).last_hidden_state
    assert torch.allclose(got, want, atol=1e-6) and not hasattr(loaded.lm, "peft_config")
    info = json.loads((folder / INFO_FILE).read_text())
    info["base"]["seed"] = 14
    (folder / INFO_FILE).write_text(json.dumps(info))
    with pytest.raises(DataError, match="trained on backbone 'tiny'.*rebuilt here it has"):
        LightModel.load(folder)


def test_the_estimate_schedules_the_profiles_dag_critical_path_and_gpus():
    """The projected seconds placed on the paper profile's DAG: DPR's model -> its NQ index -> its NQ
    run is a chain (the critical path is their sum, whatever the GPUs); two independent trainings
    share one GPU one after the other and two GPUs side by side; unmeasured jobs count 0 s (said)."""
    from harness import estimate
    from harness.config import load_config

    cfg = load_config(["configs/profiles/paper.yaml"])

    def row(stage, job, dataset, seconds):
        return {"stage": stage, "job": job, "dataset": dataset, "seconds": seconds}

    chain = [row("train", "dpr", "", 7200.0), row("index", "dpr", "nq", 3600.0), row("search", "dpr", "nq", 360.0)]
    sc = estimate.schedule(cfg, chain, 4)
    assert abs(sc["critical_hours"] - 3.1) < 1e-9 and abs(sc["wall_hours"] - 3.1) < 1e-9
    assert [name for name, _ in sc["chain"]] == ["train dpr", "index dpr on nq", "search dpr on nq"]
    assert sc["timed"] == 3 and sc["jobs"] > 400
    lines = estimate.schedule_lines(sc)
    assert "train dpr (2.0 h) -> index dpr on nq (1.0 h) -> search dpr on nq (0.1 h)" in lines[0]
    assert f"{sc['jobs'] - 3} of the profile's {sc['jobs']} jobs have no measured cost" in lines[1]
    # the unmeasured jobs named, a job's datasets together; the measured ones not
    assert len(sc["untimed"]) < sc["jobs"] - 3 and "index bm25 on " in lines[1] and "search dpr on nq" not in sc["untimed"]
    assert "train bpr" in sc["untimed"] and "train dpr" not in sc["untimed"] and f"({'; '.join(sc['untimed'])})" in lines[1]
    assert any(x.startswith("search dpr on ") and ", " in x for x in sc["untimed"])   # its other datasets
    two = [row("train", "dpr", "", 7200.0), row("train", "bpr", "", 3600.0)]  # both train on NQ's negatives, apart
    one_gpu, two_gpus = estimate.schedule(cfg, two, 1), estimate.schedule(cfg, two, 2)
    assert abs(one_gpu["wall_hours"] - 3.0) < 1e-9 and abs(two_gpus["wall_hours"] - 2.0) < 1e-9
    assert abs(one_gpu["critical_hours"] - 2.0) < 1e-9
    # a CPU job (BM25's index: the profile books no GPU for it) does not wait for a GPU
    cpu = estimate.schedule(cfg, two + [row("index", "bm25", "scifact", 1800.0)], 1)
    assert abs(cpu["wall_hours"] - 3.0) < 1e-9


def test_an_index_built_with_a_lowered_nlist_is_projected_as_a_lower_bound(tmp_path):
    """DensePhrases' index on the rehearsal's slice: its IVF trained fewer lists than the profile's
    1,048,576 (harness.indexes.phrase's recorded fallback), so the k-means at that size is not in its
    per-1,000-passage cost: the row says so and counts as a lower bound; another index does not."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    for folder, fell in (("indexes/densephrases/nq", ["phrase:IVF1048576,SQ4: nlist 1,048,576 -> 109: ..."]),
                         ("indexes/dpr/nq", [])):
        (tmp_path / folder).mkdir(parents=True)
        job = folder.split("/")[1]
        (tmp_path / folder / "meta.json").write_text(json.dumps(
            {"kind": "index", "job": job, "dataset": "nq", "documents": 500, "fallbacks": fell,
             "cost": cost.record("index", {"documents": 500}, 10.0)}))
    rows = {r["job"]: r for r in estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, siblings=False)}
    assert rows["densephrases"]["bound"] == "lower" and "fewer lists than the profile's" in rows["densephrases"]["how"]
    assert "bound" not in rows["dpr"]
    assert estimate.totals(list(rows.values()), 8)["lower_bounds"] == 1


def test_the_papers_own_figures_name_planned_jobs_and_quote_published_sizes():
    """Each of the estimate's "the paper's own" texts sits beside a job the paper profile plans (a key
    that no job has would never print), and every size it quotes ("64.6 GB") is one of that paper's
    published values in GB (configs/published), so a figure in the column cannot drift from the data."""
    import re

    from harness import estimate, plan
    from harness.config import load_config
    from harness.published import load_published

    runs = plan.get(load_config(["configs/profiles/paper.yaml"])).closure()  # every job the DAG runs
    missing = [k for k in estimate.PAPERS_OWN if (k[0], k[1], k[2] or None) not in runs]
    assert not missing, missing
    papers = {"BPR": "bpr", "SVDR": "svdr", "DensePhrases": "densephrases", "LightRetriever": "lightretriever",
              "QCR": "qcr"}
    sizes = {p: {float(r["value"]) for r in load_published(p)["records"] if r.get("unit") == "GB" and r["value"] is not None}
             for p in papers.values()}
    quoted = 0
    for key, text in estimate.PAPERS_OWN.items():
        paper = None
        for part in text.split("; "):
            named = [w for w in re.findall(r"[A-Za-z]+", part) if w in papers]
            paper = papers[named[0]] if named else paper  # a part without a paper's name continues the last
            for gb in re.findall(r"(\d+(?:\.\d+)?) GB\b(?! GPU)", part):  # "8 x 32 GB GPUs" is hardware
                quoted += 1
                assert float(gb) in sizes[paper], (key, part, sorted(sizes[paper]))
    assert quoted >= 8


def test_the_estimate_names_jobs_booked_less_memory_than_their_projected_index(tmp_path):
    """An index measured on 500 documents at 3,072 bytes each (DPR's float32 vectors) projects to
    ~60 GiB at the profile's 21M passages; the workflow books its job 8,000 MB, and the search that
    loads it too: both are named with their figures; a small index (BM25's) is not."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    for stage, folder, units, size in (("index", "indexes/dpr/nq", {"documents": 500}, 500 * 3072),
                                       ("index", "indexes/bm25/nq", {"documents": 500}, 500 * 100),
                                       ("search", "runs/nq/dpr", {"queries": 32}, 10_000)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "meta.json").write_text(json.dumps(
            {"kind": "index" if stage == "index" else "run", "job": folder.split("/")[-1 if stage == "search" else 1],
             "dataset": "nq", "bytes": size, "cost": cost.record(stage, units, 10.0)}))
    paper = load_config(["configs/profiles/paper.yaml"])
    paper = {**paper, "scheduler": {k: v for k, v in paper["scheduler"].items() if k != "mem_mb"}}  # the methods' own
    rows = {(r["stage"], r["job"]): r for r in estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)}
    dpr_gib = 500 * 3072 * estimate._documents(paper, "nq") / 500 / 2**30
    assert abs(rows["index", "dpr"]["index_gib"] - dpr_gib) < 0.01 and 55 < dpr_gib < 65
    assert rows["search", "dpr"]["index_gib"] == rows["index", "dpr"]["index_gib"]
    assert rows["index", "dpr"]["booked_gib"] == round(8000 / 1024, 2)
    t = estimate.totals(list(rows.values()), 8)
    assert [name for name, _, _ in t["under_booked"]] == ["index dpr on nq", "search dpr on nq"]
    [line] = [x for x in estimate.summary(t) if x.startswith("memory booked below")]
    assert f"index dpr on nq {dpr_gib:,.1f} GiB > 7.8 GiB booked" in line and "bm25" not in line
    # an index built from another holds both: DPR's HNSW reads DPR's Flat back
    (tmp_path / "indexes/dpr.hnsw/nq").mkdir(parents=True)
    (tmp_path / "indexes/dpr.hnsw/nq/meta.json").write_text(json.dumps(
        {"kind": "index", "job": "dpr.hnsw", "dataset": "nq", "bytes": 500 * 7180, "spec": "faiss:HNSW512",
         "cost": cost.record("index", {"documents": 500}, 1.0)}))
    rows = {(r["stage"], r["job"]): r for r in estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)}
    hnsw = rows["index", "dpr.hnsw"]
    assert hnsw["index_gib"] == pytest.approx(hnsw["disk_gib"] + rows["index", "dpr"]["disk_gib"])
    assert 195 < hnsw["index_gib"] < 205  # 140.5 GiB of graph and vectors + the 60.3 GiB it is built from
    # its insertions search a graph that grows with the corpus: priced per 1,000 passages, a lower bound
    assert hnsw["bound"] == "lower" and "HNSW graph's insertion cost grows" in hnsw["how"]
    assert "bound" not in rows["index", "dpr"]


@pytest.mark.parametrize("profile", ["paper", "small"])
def test_a_profile_computes_every_ir_measure_the_default_computes(profile):
    """The measures the papers' tables, claims and Figure 3 read (QCR's RR@10, Success@10 and
    Success@100) are computed in every profile: the paper profile kept LightRetriever's four after QCR
    added three to the default, and the rehearsal's Figure 3 job failed on it."""
    from harness.config import load_config

    wanted = set(load_config()["evaluate"]["ir_measures"])
    assert {"RR@10", "Success@10", "Success@100"} <= wanted
    have = set(load_config([f"configs/profiles/{profile}.yaml"])["evaluate"]["ir_measures"])
    assert wanted <= have, sorted(wanted - have)


def test_the_paper_profile_books_each_index_job_the_memory_its_projected_index_holds(tmp_path):
    """scheduler.mem_mb books a job more memory than its method declares (harness.workflow.resources,
    read by the estimate too); the paper profile books every index and search job the committed
    ledger projects at least its index, or the peak the rehearsal measured where that is larger (the
    phrase index's folder also holds the memory-mapped dump, so its figure is high: booked for the
    index alone, 320 GB); a key naming no job is a clear error."""
    from types import SimpleNamespace

    from harness import estimate, ledger, plan
    from harness import workflow as hwf
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    mem = lambda stage, **wc: hwf.resources(paper, stage, SimpleNamespace(**wc), "mem_mb")  # noqa: E731
    assert mem("index", job="dpr", dataset="nq") == paper["scheduler"]["mem_mb"]["index dpr"] == 75000
    # the learning check's untrained twin builds the same index: it books what its twin books
    assert mem("index", job="dpr@init", dataset="nq") == 75000 and mem("search", job="svdr@init", dataset="nq") == 390000
    # a variant's train job without an entry of its own books its method's (the same training corpora held);
    # an index or search variant does not (LightRetriever's other LLMs index the small BEIR sets)
    assert mem("train", job="bpr.a0") == mem("train", job="bpr@init") == paper["scheduler"]["mem_mb"]["train bpr"]
    assert mem("index", job="dpr.hnsw", dataset="nq") == 250000 and mem("search", job="svdr.abl-m1", dataset="nq") == 400000
    # '<stage> <job id> on <dataset>' books one dataset's job
    assert mem("index", job="lightretriever", dataset="msmarco") == 160000
    assert mem("index", job="lightretriever", dataset="scifact") == mem("index", job="lightretriever.llama-8b", dataset="scifact") == 8000
    bad_on = {**paper, "scheduler": {**paper["scheduler"], "mem_mb": {"index lightretriever on nq": 1000}}}
    with pytest.raises(ConfigError, match=r"'index lightretriever on nq' names no job"):
        plan.Plan(bad_on, plan.get(paper).jobs.values()).check()
    # the negatives rule books through the plan too (it had 4,000 MB in its rule): NQ's corpus by id
    assert mem("negatives", dataset="nq") == 8000 and hwf.resources(load_config(), "negatives", SimpleNamespace(dataset="smoke"), "mem_mb") == 4000
    assert mem("index", job="bm25", dataset="nq") == plan.get(paper).job("index", "bm25", "nq").mem_mb
    assert mem("evaluate", job="dpr", dataset="nq") == 4000
    short = estimate.totals(estimate.estimate(paper, tmp_path / "none", ledger.read()), 8)["under_booked"]
    assert not [s for s in short if "densephrases" not in s[0]], short
    bad = {**paper, "scheduler": {**paper["scheduler"], "mem_mb": {"index dpx": 1000}}}
    with pytest.raises(ConfigError, match=r"scheduler.mem_mb: 'index dpx' names no job.*did you mean 'index dpr'"):
        plan.Plan(bad, plan.get(paper).jobs.values()).check()


def test_a_variant_or_init_twin_is_priced_from_the_job_it_varies_only_where_its_step_and_shape_are_the_same(tmp_path):
    """BPR's margin and gamma variants train the same step at the same batch as BPR: a measured BPR
    step prices their own steps; a learning check's @init twin indexes with the same encoder (its
    train job: one step). SVDR's w/o-negatives variant doubles the batch, BPR's variant search encodes
    the corpus itself, QCR's grid models train at other batches, LightRetriever's other LLMs are other
    shapes, DPR's HNSW index is another index: none is priced from another job."""
    import json

    from harness import cost, estimate, plan
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    p = plan.get(paper)
    sib = lambda *key: estimate.sibling_of(p, p.job(*key))  # noqa: E731
    assert sib("train", "bpr.g005", None) == ("bpr", "its variant sets gamma")
    assert sib("train", "bpr.ce", None) == ("bpr", "its variant sets cand_loss")
    assert sib("train", "dpr@init", None) == ("dpr", "the initial checkpoint: one step")
    assert sib("index", "svdr.emb@init", "nq") == ("svdr.emb", "random initial weights")
    assert sib("search", "svdr@init", "nq")[0] == "svdr"
    assert sib("train", "svdr.abl-noneg", None) == (None, "its variant sets batch_size, hard_negatives")
    assert sib("search", "bpr.a0", "nq") == (None, "another step than search bpr's")
    assert sib("train", "qcr.grid-b0k0", None) == (None, "other parameters than train qcr's")
    assert sib("train", "lightretriever.llama-8b", None)[0] is None
    assert sib("index", "dpr.hnsw", "nq")[0] is None and sib("train", "bpr", None) == (None, "not a variant")
    assert sib("search", "densephrases.qs", "nq")[0] is None  # it searches one index of the two
    # LightRetriever's binary sparse queries (Table 4) do the counts' work: its model, index and search are
    # priced from the main model's; its qfull-dlight and direct-emb encode other things
    assert sib("train", "lightretriever.binary", None) == ("lightretriever", "its variant sets sparse_query")
    assert sib("index", "lightretriever.binary", "scifact")[0] == "lightretriever"
    assert sib("search", "lightretriever.binary", "scifact")[0] == "lightretriever"
    assert sib("train", "lightretriever.qfull-dlight", None)[0] is None
    assert sib("train", "lightretriever.direct-emb", None) == \
        (None, "less work than train lightretriever's: dense_query: embedding, where it is light")   # unless asked

    cost.allow_fallbacks(False)
    for folder, meta in {"models/bpr": {"kind": "model", "job": "bpr", "cost": cost.record("train", {"steps": 2}, 30.0)},
                         "indexes/dpr/nq": {"kind": "index", "job": "dpr", "dataset": "nq", "bytes": 3072 * 500,
                                            "cost": cost.record("index", {"documents": 500}, 10.0)}}.items():
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "meta.json").write_text(json.dumps(meta))
    rows = {(r["stage"], r["job"]): r for r in estimate.estimate(paper, tmp_path, other_datasets=False)}
    assert not rows["train", "bpr"].get("borrowed_from") and not rows["index", "dpr"].get("borrowed_from")
    g = rows["train", "bpr.g005"]
    units, _ = estimate.paper_units(paper, p.job("train", "bpr.g005", None))
    assert g["borrowed_from"] == "bpr" and g["seconds"] == pytest.approx(15.0 * units)
    assert "(per-unit cost of train bpr: the same step on the same encoder shape, its variant sets gamma)" in g["how"]
    init = rows["index", "dpr@init"]
    assert init["seconds"] == pytest.approx(rows["index", "dpr"]["seconds"]) and init["disk_gib"] == rows["index", "dpr"]["disk_gib"]
    assert rows["train", "bpr@init"]["seconds"] == pytest.approx(15.0)  # one step
    assert ("train", "svdr.abl-noneg") not in rows and ("search", "bpr.a0") not in rows
    assert ("train", "dpr@init") not in rows  # DPR's training was not measured here
    t = estimate.totals(list(rows.values()), 8)
    assert t["siblings"] == sum(1 for r in rows.values() if r.get("borrowed_from")) == 9  # 7 BPR variants, 2 @init
    assert t["jobs"] - t["borrowed"] - t["siblings"] == 2
    assert t["init_twins"] == 2 and t["init_twin_hours"] == pytest.approx((init["seconds"] + 15.0) / 3600)
    lines = estimate.summary(t)
    assert lines[0].startswith("jobs measured: 2 (and 9 variant and @init jobs from the per-unit cost of the job they vary")
    assert any(x.startswith("of which the learning check's initial checkpoints (the @init twins") for x in lines)


def test_a_fusion_is_priced_from_a_fusion_of_the_same_kind_and_a_job_doing_less_as_an_upper_bound(tmp_path):
    """LightRetriever's variants' hybrids interpolate two runs per query as its own hybrid does,
    whatever models wrote them: one measured hybrid prices them (QCR's RRF fusions, another kind, are
    not). Its dense-only variant indexes (``sparse: false``) encode what the main model's index encodes
    without its sparse side, and an index encodes no query (``dense_query`` is the query side's): they
    are priced from the main model's index as upper bounds, and only when the caller asks for them.
    Direct-Emb's search looks its queries up in the input embedding, where the main model's builds its
    query tokens' cached vectors: at most its work. Doc-Light's index (documents' light vectors) is
    another step's work: not priced."""
    import json

    from harness import cost, estimate, plan
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    p = plan.get(paper)
    measured = {("search", "lightretriever.hybrid", "scifact"), ("index", "lightretriever", "scifact"),
                ("search", "lightretriever", "scifact"), ("search", "bm25", "scifact")}
    job = lambda *key: p.job(*key)  # noqa: E731
    assert estimate.same_fusion(p, job("search", "lightretriever.qwen-7b-hybrid", "scifact"), measured) == \
        ("lightretriever.hybrid", "the same fusion (interpolate of 2 runs) per query, whatever models wrote its runs")
    assert estimate.sibling_of(p, job("search", "lightretriever.nokl-hybrid", "scifact"), measured)[0] == "lightretriever.hybrid"
    assert estimate.same_fusion(p, job("search", "qcr.rrf", "scifact"), measured) == \
        (None, "no fusion job priced that fuses 2 runs by rrf")
    assert estimate.same_fusion(p, job("search", "lightretriever", "scifact"), measured) == (None, "not a fusion job")
    assert estimate.same_fusion(p, job("search", "lightretriever.nokl-hybrid", "fiqa"), measured)[0] is None  # other dataset

    less: list[str] = []
    assert estimate.sibling_of(p, job("index", "lightretriever.mrl", "scifact"), measured, less)[0] == "lightretriever"
    assert less == ["sparse: False, where it is True"]
    assert estimate.sibling_of(p, job("index", "lightretriever.mrl", "scifact"), measured) == \
        (None, "less work than index lightretriever's: sparse: False, where it is True")   # strict unless asked
    less = []
    assert estimate.sibling_of(p, job("index", "lightretriever.direct-emb", "scifact"), measured, less)[0] == "lightretriever"
    assert less == ["sparse: False, where it is True"]   # dense_query: the query side's, not the index's
    less = []
    assert estimate.sibling_of(p, job("search", "lightretriever.direct-emb", "scifact"), measured, less)[0] == "lightretriever"
    assert less == ["dense_query: embedding, where it is light"]
    less = []
    assert estimate.sibling_of(p, job("index", "lightretriever.light-both", "scifact"), measured, less) == \
        (None, "its variant sets dense_doc") and less == []
    assert estimate.sibling_of(p, job("index", "lightretriever.qfull-dlight", "scifact"), measured, [])[0] is None
    assert estimate.sibling_of(p, job("search", "lightretriever.qfull-dlight", "scifact"), measured, [])[0] is None

    cost.allow_fallbacks(False)
    for folder, meta in {"indexes/lightretriever/scifact": {"kind": "index", "job": "lightretriever", "dataset": "scifact",
                                                            "bytes": 10**6, "cost": cost.record("index", {"documents": 500}, 10.0)},
                         "runs/scifact/lightretriever.hybrid": {"kind": "run", "job": "lightretriever.hybrid",
                                                                "dataset": "scifact",
                                                                "cost": cost.record("search", {"queries": 30}, 0.3)}}.items():
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "meta.json").write_text(json.dumps(meta))
    rows = {(r["stage"], r["job"], r["dataset"]): r for r in estimate.estimate(paper, tmp_path, other_datasets=False)}
    main, mrl = rows["index", "lightretriever", "scifact"], rows["index", "lightretriever.mrl", "scifact"]
    assert mrl["seconds"] == pytest.approx(main["seconds"]) and mrl["bound"] == "upper" and main.get("bound") is None
    assert "(it does at most that job's work, sparse: False, where it is True: an upper bound)" in mrl["how"]
    hyb, var = rows["search", "lightretriever.hybrid", "scifact"], rows["search", "lightretriever.qwen-7b-hybrid", "scifact"]
    assert var["seconds"] == pytest.approx(hyb["seconds"]) and var["borrowed_from"] == "lightretriever.hybrid"
    assert "the same step on the same encoder shape" not in var["how"] and not var.get("bound")
    assert ("index", "lightretriever.light-both", "scifact") not in rows and ("search", "qcr.rrf", "scifact") not in rows
    t = estimate.totals(list(rows.values()), 8)
    ups = [r for r in rows.values() if r.get("bound") == "upper"]
    assert t["upper_bounds"] == len(ups) == 3   # mrl, noinst and direct-emb's scifact indexes
    assert f"; 3 jobs ({sum(r['seconds'] for r in ups) / 3600:,.1f} h) are upper bounds" in estimate.summary(t)[0]

def test_a_variants_index_and_search_are_priced_from_another_variant_whose_model_differs_in_training_alone(tmp_path):
    """QCR's grid models grid-b0k1 and grid-b1k1 train at batch 256 and 2,048, both at K 250, and its
    no-entropy variant drops a loss term: their indexes encode the same passages into the same codes
    with the same encoder, so one measured grid-b0k1 index prices the other two per document (their
    training, at another batch, is never priced so). The main model's index does the no-entropy
    variant's work, and its @init twin's the main model's: both priced through them. The K-150 grid
    models and QCR-uns. (Contriever) are not."""
    import json

    from harness import cost, estimate, plan
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    p = plan.get(paper)
    measured = {("index", "qcr.grid-b0k1", "msmarco"), ("train", "qcr.grid-b0k1", None)}
    sib = lambda *key: estimate.sibling_of(p, p.job(*key), measured)  # noqa: E731
    assert estimate.sibling_of(p, p.job("index", "qcr.grid-b1k1", "msmarco")) == (None, "other parameters than index qcr's")
    assert sib("index", "qcr.grid-b1k1", "msmarco") == ("qcr.grid-b0k1", "its models differ from qcr.grid-b0k1's in training alone")
    assert sib("index", "qcr.noent", "msmarco")[0] == "qcr.grid-b0k1"
    assert sib("index", "qcr.grid-b1k0", "msmarco")[0] is None  # K 150
    assert sib("index", "qcr.grid-b1k1", "scifact")[0] is None  # not measured there (the estimate: via msmarco)
    assert sib("train", "qcr.grid-b1k1", None)[0] is None
    assert sib("index", "qcr", "msmarco") == ("qcr.grid-b0k1", "qcr.noent does its work per unit (the variant noent) "
                                              "and its models differ from qcr.grid-b0k1's in training alone")
    assert estimate.sibling_of(p, p.job("index", "qcr", "msmarco"), {("index", "qcr@init", "msmarco")}) == \
        ("qcr@init", "qcr@init does its work per unit: random initial weights")   # its own twin first
    assert estimate.same_model(p, p.job("index", "qcr.uns", "msmarco"), measured)[0] is None   # a variant
    assert estimate.same_model(p, p.job("index", "qcr", "msmarco"), set())[0] is None   # nothing priced
    assert estimate.same_model(p, p.job("train", "qcr", None), measured)[0] is None   # its training is its own
    assert estimate.same_start(p, p.job("index", "qcr.uns", "msmarco")) == []
    assert estimate.same_start(p, p.job("search", "qcr.grid-b1k1", "msmarco")) == ["qcr.grid-b0k1", "qcr.noent"]

    cost.allow_fallbacks(False)
    folder = tmp_path / "indexes" / "qcr.grid-b0k1" / "msmarco"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"kind": "index", "job": "qcr.grid-b0k1", "dataset": "msmarco",
                                                  "bytes": 4000 * 500, "cost": cost.record("index", {"documents": 500}, 10.0)}))
    rows = {(r["stage"], r["job"], r["dataset"]): r for r in estimate.estimate(paper, tmp_path)}
    ref = rows["index", "qcr.grid-b0k1", "msmarco"]
    for job, ds in (("qcr.grid-b1k1", "msmarco"), ("qcr.noent", "msmarco"), ("qcr.grid-b1k1", "scifact")):
        r = rows["index", job, ds]
        same = rows["index", "qcr.grid-b0k1", ds]
        assert r["borrowed_from"] == "qcr.grid-b0k1" and r["seconds"] == pytest.approx(same["seconds"]), (job, ds)
        assert "its models differ from qcr.grid-b0k1's in training alone" in r["how"]
    assert rows["index", "qcr.grid-b1k1", "scifact"]["how"].count("measured on msmarco") == 1
    assert ref["seconds"] > 0 and not ref.get("borrowed_from")
    main, init = rows["index", "qcr", "msmarco"], rows["index", "qcr@init", "msmarco"]
    assert main["borrowed_from"] == "qcr.grid-b0k1" and main["seconds"] == pytest.approx(ref["seconds"])
    assert "qcr.noent does its work per unit" in main["how"]
    assert init["borrowed_from"] == "qcr" and init["seconds"] == pytest.approx(ref["seconds"])   # through qcr's
    assert "(per-unit cost of index qcr: the same step on the same encoder shape, random initial weights; qcr's own " \
           "from index qcr.grid-b0k1's)" in init["how"]
    sci = rows["index", "qcr", "scifact"]   # through the grid model's, projected from MS MARCO
    assert sci["seconds"] == pytest.approx(rows["index", "qcr.grid-b0k1", "scifact"]["seconds"])
    assert "(per-unit cost of index qcr.grid-b0k1 measured on msmarco: the same step on the same encoder shape, " \
           "qcr.noent does its work per unit" in sci["how"]
    assert not {k for k in rows if k[1] in ("qcr.grid-b0k0", "qcr.grid-b1k0", "qcr.uns")}
    assert ("train", "qcr.grid-b1k1", None) not in rows
    # SVDR's ablation models are variants by their ``ablation`` parameter: w/o neg (batch 256, no hard
    # negatives: training alone) prices the m = 1, m = 100 and w/o retrieval searches; ref (the main
    # model, its own start) and w/o sp (VDR's model) are not priced from it
    svdr = {("search", "svdr.abl-noneg", "nq")}
    for a in ("m1", "m100", "noret"):
        assert estimate.sibling_of(p, p.job("search", f"svdr.abl-{a}", "nq"), svdr)[0] == "svdr.abl-noneg", a
    for a in ("ref", "nosp"):
        assert estimate.sibling_of(p, p.job("search", f"svdr.abl-{a}", "nq"), svdr)[0] is None, a
    # each priced from the measured job, not through another priced from it (svdr.abl-m1 sorts first)
    folder = tmp_path / "runs" / "nq" / "svdr.abl-noneg"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"kind": "run", "job": "svdr.abl-noneg", "dataset": "nq",
                                                  "cost": cost.record("search", {"queries": 32}, 3.2)}))
    rows = {(r["stage"], r["job"], r["dataset"]): r for r in estimate.estimate(paper, tmp_path)}
    for a in ("m1", "m100", "noret"):
        assert rows["search", f"svdr.abl-{a}", "nq"]["borrowed_from"] == "svdr.abl-noneg", a


def test_a_measure_job_measured_on_one_dataset_prices_it_on_the_others_as_measured(tmp_path):
    """LightRetriever's Figure 5 (nDCG@10 at each dims and terms point, and a plot) runs on five BEIR
    sets; the rehearsal measured it on SciFact: the others are priced as measured there (another
    corpus; a lower bound, as every measure job is), said in the row. Without other datasets, not."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    cost.allow_fallbacks(False)
    folder = tmp_path / "metrics" / "scifact" / "lightretriever.fig5"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"kind": "metrics", "job": "lightretriever.fig5", "dataset": "scifact",
                                                  "cost": {"seconds": 2.0, "host_peak_bytes": 2**28}}))
    figs = {r["dataset"]: r for r in estimate.estimate(paper, tmp_path) if r["job"] == "lightretriever.fig5"}
    assert set(figs) == {"scifact", "arguana", "fiqa", "nfcorpus", "scidocs"}
    assert figs["scifact"]["seconds"] == 2.0 and not figs["scifact"].get("measured_on_dataset")
    for ds in ("arguana", "fiqa", "nfcorpus", "scidocs"):
        r = figs[ds]
        assert r["seconds"] == 2.0 and r["bound"] == "lower" and r["measured_on_dataset"] == "scifact", ds
        assert r["how"].endswith("(as measured on scifact: another corpus)"), r["how"]
    assert {r["dataset"] for r in estimate.estimate(paper, tmp_path, other_datasets=False)} == {"scifact"}


def test_a_search_that_encodes_its_corpus_is_priced_per_document_and_per_query(tmp_path):
    """BPR's train-variant searches build their own index: 6 min 40 s of the rehearsal's 402 s encoded
    the 2,067 passages. Spread over its 32 queries (12.6 s a query) that projected 12.6 h for NQ's 3,610
    questions and nothing for the 21M passages; the corpus part is now priced per document."""
    import json

    from harness import cost, estimate, plan
    from harness.config import load_config

    cost.allow_fallbacks(False)
    rec = cost.record("search", {"queries": 32, "corpus_documents": 2000, "corpus_seconds": 400.0}, 402.0)
    assert rec["pricing"] == "corpus + queries" and rec["corpus_seconds_per_1k"] == 200.0
    assert rec["seconds_per_unit"] == pytest.approx(2.0 / 32)
    assert "corpus_seconds_per_1k" not in cost.record("search", {"queries": 32}, 402.0)
    paper = load_config(["configs/profiles/paper.yaml"])
    folder = tmp_path / "runs" / "nq" / "bpr.a0"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"kind": "run", "job": "bpr.a0", "dataset": "nq", "cost": rec}))
    row = next(r for r in estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)
               if r["stage"] == "search" and r["job"] == "bpr.a0")
    assert row["seconds"] == pytest.approx(2.0 / 32 * 3610 + 200.0 * 21015.324)
    assert row["how"].startswith("3,610 test queries + 21,015,324 documents it encodes itself")
    assert estimate.paper_units(paper, plan.get(paper).job("search", "bpr.a0", "nq"))[0] == 3610


def test_a_variant_on_another_backbone_is_scaled_from_its_methods_job_by_the_backbones_matmul_parameters(tmp_path):
    """LightRetriever's other LLMs (Tables 2, 8-10) run its step on another backbone: a measured
    Llama-3.2-1B job prices each at its seconds x the ratio of the backbones' matmul parameters (counted
    from configs/backbones on the meta device), said to be rough and unmeasured, with no memory or disk
    projected; a variant that also changes another shape setting, or none, is not scaled."""
    import json

    from harness import cost, estimate, plan
    from harness.config import load_config
    from harness.models import backbones

    paper = load_config(["configs/profiles/paper.yaml"])
    p = plan.get(paper)

    def count(name):
        c = backbones.load_config(name, name)
        return backbones.matmul_parameters(c, backbones.lm_class(c))

    eight, one = count("llama31-8b"), count("llama32-1b")
    assert 7.4e9 < eight < 7.6e9 and 1.2e9 < one < 1.3e9   # the 8B's untied LM head counted, its embedding table not
    base, ratio, why = estimate.backbone_scale(p, p.job("train", "lightretriever.llama-8b", None))
    assert base == "lightretriever" and ratio == pytest.approx(eight / one) and "llama31-8b (7.50B)" in why
    assert estimate.backbone_scale(p, p.job("index", "lightretriever.qwen-7b", "scifact"))[0] == "lightretriever"
    # never priced as the same encoder shape (an index or search job hashes its model's variant through its input)
    assert estimate.sibling_of(p, p.job("index", "lightretriever.qwen-7b", "scifact")) == \
        (None, "its variant sets backbone, grad_cache_chunk")
    assert estimate.backbone_scale(p, p.job("train", "lightretriever.nokl", None)) == \
        (None, 1.0, "its variant sets no shape setting")
    assert estimate.backbone_scale(p, p.job("train", "lightretriever", None))[0] is None   # the measured job itself
    assert estimate.backbone_scale(p, p.job("train", "qcr.uns", None))[0] is None   # Contriever, and generated queries

    cost.allow_fallbacks(False)
    for folder, meta in {"models/lightretriever": {"kind": "model", "job": "lightretriever",
                                                   "cost": cost.record("train", {"steps": 2}, 30.0), "bytes": 10**6},
                         "indexes/lightretriever/scifact": {"kind": "index", "job": "lightretriever", "dataset": "scifact",
                                                            "bytes": 10**6, "cost": cost.record("index", {"documents": 500}, 10.0)}}.items():
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "meta.json").write_text(json.dumps(meta))
    rows = {(r["stage"], r["job"], r["dataset"]): r for r in estimate.estimate(paper, tmp_path, other_datasets=False)}
    main, big = rows["train", "lightretriever", ""], rows["train", "lightretriever.llama-8b", ""]
    assert big["scaled_by"] == pytest.approx(eight / one, rel=1e-3) and big["borrowed_from"] == "lightretriever"
    units = estimate.paper_units(paper, p.job("train", "lightretriever.llama-8b", None))[0]
    assert big["seconds"] == pytest.approx(15.0 * units * eight / one)
    assert "not measured, memory and disk not projected" in big["how"] and big["disk_gib"] is None and big["host_peak_gib"] is None
    assert rows["index", "lightretriever.qwen-1b5", "scifact"]["seconds"] == pytest.approx(
        rows["index", "lightretriever", "scifact"]["seconds"] * count("qwen25-1b5") / one)
    assert rows["train", "lightretriever.nokl", ""]["borrowed_from"] == "lightretriever"   # a sibling: the same shape
    assert not rows["train", "lightretriever.nokl", ""].get("scaled_by") and main["seconds"] > 0
    t = estimate.totals(list(rows.values()), 8)
    assert t["scaled"] == sum(1 for r in rows.values() if r.get("scaled_by")) == 12   # 6 LLMs x (train, scifact index)
    assert estimate.summary(t)[0].count("12 variant jobs on another backbone scaled") == 1
    assert estimate.estimate(paper, tmp_path, other_datasets=False, scaled=False)[0]   # and off
    assert not [r for r in estimate.estimate(paper, tmp_path, other_datasets=False, scaled=False) if r.get("scaled_by")]


def test_disk_scales_what_grows_with_the_corpus_and_keeps_a_codebook_once():
    """BPR Table 1's DPR + PQ: 96 bytes a passage and a 786 KB codebook. Measured over 2,067 passages
    (1,001,486 bytes), a linear projection to the 21M gave 10.2 GB; with the codebook kept once, 2.0 GB
    (the paper's 2.0 GB)."""
    from types import SimpleNamespace

    from harness import estimate

    job, units = SimpleNamespace(stage="index"), 21015.324
    cost = {"units": 2.067}
    linear = estimate.disk(job, units, cost, 1_001_486)
    kept = estimate.disk(job, units, cost, 1_001_486, fixed_bytes=786_476)
    assert 10.1e9 < linear < 10.3e9 and kept == pytest.approx(786_476 + (1_001_486 - 786_476) * units / 2.067)
    assert 2.0e9 < kept < 2.3e9
    assert estimate.disk(job, units, cost, 100, fixed_bytes=10**6) == 100  # never more fixed than was measured
    assert estimate.disk(SimpleNamespace(stage="train"), 5.0, {}, 800, fixed_bytes=10) == 800  # a model: as measured


def test_a_phrase_dump_is_projected_at_the_profiles_kept_fraction_not_a_two_step_filters():
    """DensePhrases' NQ index on 2026-12-06 (AVX2 EPYC): the two-step model's filter threshold kept 99.8%
    of the tokens, a 411 MB folder over 2,067 passages, and the estimate's disk rose from 3,271 to 9,182
    GiB with it. The ledger line keeps the dump's kept fraction; the estimate scales the folder (dump and
    the indexes over it: one row a kept token) to the paper profile's 25% (App. E: "we filter about 75%
    of tokens"), and says so. A record without the fraction, another stage, or one at the profile's
    fraction is projected as before."""
    from harness import estimate, ledger, plan
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    job = plan.get(paper).job("index", "densephrases", "nq")
    meta = {"kind": "index", "job": "densephrases", "method": "densephrases", "dataset": "nq", "bytes": 411_411_955,
            "cost": {"seconds": 1918.5, "seconds_per_unit": 885.27, "unit": "1k documents", "units": 2.067},
            "dump": {"tokens_seen": 317_369, "tokens_kept": 316_864, "kept_fraction": 316_864 / 317_369}}
    line = ledger.entry(meta)
    assert line["kept_fraction"] == pytest.approx(0.9984, abs=1e-4) and "dump" not in line
    kept = estimate.kept_fractions(paper, job, line)
    assert kept == (pytest.approx(0.9984, abs=1e-4), 0.25)
    units, _ = estimate.paper_units(paper, job)
    plain = estimate.disk(job, units, line["cost"], line["bytes"])
    scaled = estimate.disk(job, units, line["cost"], line["bytes"], kept=kept)
    assert scaled == pytest.approx(plain * 0.25 / kept[0], rel=1e-6)
    row = estimate.project(paper, job, line["cost"], None, line["bytes"], kept=kept)
    assert row["disk_gib"] == pytest.approx(scaled / 2**30, abs=1e-3) and "25% of tokens kept" in row["how"]
    assert estimate.kept_fractions(paper, job, meta) == kept   # a rehearsal folder's meta.json, as read
    assert estimate.kept_fractions(paper, job, {k: v for k, v in line.items() if k != "kept_fraction"}) is None
    assert estimate.kept_fractions(paper, job, {**line, "kept_fraction": 0.25}) is None
    assert estimate.kept_fractions(paper, plan.get(paper).job("train", "densephrases"), line) is None


def test_a_job_that_holds_its_corpus_notes_it_and_the_estimate_projects_it(tmp_path):
    """store.corpus_by_id / corpus_list / corpus_texts note the corpus a job holds whole (its records
    and their bytes in Python objects, within 10% of what tracemalloc counts); the job's cost carries
    it, a new job starts with none; the estimate scales it by the profile's documents (NQ's 21M
    passages at ~1,000 bytes each: ~20 GiB) and names the job where that exceeds its booking."""
    import json
    import tracemalloc

    from harness import cost, estimate
    from harness.config import load_config
    from harness.datasets import Doc, store

    data = tmp_path / "data" / "nq"
    data.mkdir(parents=True)
    store.write_corpus(data, [Doc(f"d{i}", "Title" if i % 2 else "", "word " * (50 + i % 150)) for i in range(3000)])
    for fn in (store.corpus_by_id, store.corpus_list, store.corpus_texts):
        cost.allow_fallbacks(False)
        tracemalloc.start()
        held = fn(data)
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        rec = cost.record("index", {"documents": len(held)}, 1.0)["held_corpora"]
        assert rec["nq"]["documents"] == 3000 and abs(rec["nq"]["bytes"] / traced - 1) < 0.1, (fn.__name__, rec, traced)
        del held
    cost.allow_fallbacks(False)
    assert "held_corpora" not in cost.record("index", {"documents": 3}, 1.0)
    # the same corpus held twice (one step after the other) counts once; two corpora add up
    cost.corpus_held("nq", 10, 100)
    cost.corpus_held("nq", 10, 80)
    cost.corpus_held("msmarco", 5, 50)
    assert cost.record("train", {"steps": 1}, 1.0)["held_corpora"] == {"msmarco": {"documents": 5, "bytes": 50},
                                                                      "nq": {"documents": 10, "bytes": 100}}
    cost.allow_fallbacks(False)
    # the estimate: an index job measured on 500 passages holding them at 1,000 bytes each
    (tmp_path / "indexes/bpr/nq").mkdir(parents=True)
    c = {**cost.record("index", {"documents": 500}, 10.0), "held_corpora": {"nq": {"documents": 500, "bytes": 500_000}}}
    (tmp_path / "indexes/bpr/nq/meta.json").write_text(json.dumps(
        {"kind": "index", "job": "bpr", "dataset": "nq", "bytes": 500 * 96, "cost": c}))
    paper = load_config(["configs/profiles/paper.yaml"])
    paper = {**paper, "scheduler": {k: v for k, v in paper["scheduler"].items() if k != "mem_mb"}}  # the methods' own
    [row] = [r for r in estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)
             if (r["stage"], r["job"]) == ("index", "bpr")]
    gib = 1000 * estimate._documents(paper, "nq") / 2**30
    assert row["held_gib"] == pytest.approx(gib, abs=0.01) and 19 < gib < 20.5
    assert row["host_projected_gib"] == pytest.approx(row["host_peak_gib"] + gib - 500_000 / 2**30, abs=0.02)
    assert "holds in memory what grows with its corpus: nq 21,015,324 documents x 1,000 bytes" in row["how"]
    t = estimate.totals([row], 8)
    assert [name for name, _, _ in t["under_booked"]] == ["index bpr on nq"]   # booked 8,000 MB
    lines = estimate.summary(t)
    assert any("1 job(s) hold their corpus (or its ids and offsets) in memory" in x for x in lines)
    assert any(x.startswith("memory booked below the projected index or corpus") and "index bpr on nq" in x for x in lines)


def test_a_sparse_csr_index_past_2_31_entries_is_projected_with_int64_ids():
    """SVDR's E(D) measured on 2,067 passages at 777 entries each (8 bytes an entry on the slice: float32
    values, int32 ids) projects to NQ's 21M passages at 12 bytes an entry (~16G entries, past 2^31:
    int64 ids and offsets, as scipy keeps them): ~182 GiB, not ~122; below 2^31 it scales linearly, and
    another spec always does."""
    from types import SimpleNamespace

    from harness import estimate

    job = SimpleNamespace(stage="index")
    n, per = 2067, 777
    measured = 8 * n * per + 4 * (n + 1)
    cost = {"units": n / 1000}
    full = 21_015_324
    got = estimate.disk(job, full / 1000, cost, measured, None, "sparse-csr")
    assert got == pytest.approx(12 * full * per + 8 * (full + 1), rel=1e-6) and 180 < got / 2**30 < 185
    assert estimate.disk(job, full / 1000, cost, measured, None, "faiss:Flat") == pytest.approx(measured * full / n)
    small = 100_000   # 77.7M entries: int32 still
    assert estimate.disk(job, small / 1000, cost, measured, None, "sparse-csr") == pytest.approx(measured * small / n)


def test_a_job_whose_measured_peak_is_above_its_booking_is_named_under_booked(tmp_path):
    """The booking check counts the peak the rehearsal measured, not only the projected index or
    corpus: QCR's k-means index peaked at 6.1 GiB on its slice with 6,000 MB booked, and no projected
    index said so. A peak below the booking is not named; a peak above it is, with its figure."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    paper = {**paper, "scheduler": {k: v for k, v in paper["scheduler"].items() if k != "mem_mb"}}  # the methods' own

    def row(peak_gib: float) -> dict:
        folder = tmp_path / str(peak_gib) / "indexes/qcr.kmeans/msmarco"
        folder.mkdir(parents=True)
        cost.allow_fallbacks(False)
        c = {**cost.record("index", {"documents": 500}, 10.0), "host_peak_bytes": int(peak_gib * 2**30)}
        (folder / "meta.json").write_text(json.dumps({"kind": "index", "job": "qcr.kmeans", "dataset": "msmarco",
                                                      "bytes": 500 * 100, "cost": c}))
        [r] = [r for r in estimate.estimate(paper, tmp_path / str(peak_gib), other_datasets=False, siblings=False)
               if (r["stage"], r["job"], r["dataset"]) == ("index", "qcr.kmeans", "msmarco")]
        return r

    low, high = row(3.0), row(6.13)
    assert low["booked_gib"] == high["booked_gib"] == round(4000 / 1024, 2)   # the method's own booking
    assert estimate.totals([low], 8)["under_booked"] == []
    t = estimate.totals([high], 8)
    assert t["under_booked"] == [("index qcr.kmeans on msmarco", 6.13, 3.91)]
    [line] = [x for x in estimate.summary(t) if x.startswith("memory booked below")]
    assert "or peaked above it on the rehearsal's slice" in line and "index qcr.kmeans on msmarco 6.1 GiB > 3.9 GiB" in line


def test_an_ablation_searchs_e_d_held_in_memory_takes_the_same_int64_rule_as_the_index_on_disk():
    """SVDR's ablation search holds an E(D) in memory (cost.corpus_held with its CSR entries). Measured
    on the Intel ledger's 2,067 passages at 775 entries each (12,822,456 bytes), the estimate sizes it
    at NQ's 21M passages as the index on disk is sized: 12 bytes an entry past 2^31 (~182 GiB), not the
    linear ~121 GiB it said before; a corpus held without entries (Python objects) still scales
    linearly, and a later, larger hold without entries drops the earlier one's."""
    from harness import cost, estimate
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    full = estimate._documents(paper, "nq")
    n, entries = 2067, 1_601_773
    b = 8 * entries + 4 * (n + 1)
    assert b == 12_822_456
    total, measured, what = estimate.held_corpora(paper, {"nq": {"documents": n, "bytes": b, "csr_entries": entries}})
    grown = entries * full / n
    assert grown > estimate.INT32_MAX and measured == b
    assert total == pytest.approx(12 * grown + 8 * (full + 1), rel=1e-9) and 180 < total / 2**30 < 185
    assert "775 entries (past 2^31: int64 ids and offsets" in what
    job = type("J", (), {"stage": "index"})()
    assert total == pytest.approx(estimate.disk(job, full / 1000, {"units": n / 1000}, b, None, "sparse-csr"))
    linear, _, what = estimate.held_corpora(paper, {"nq": {"documents": n, "bytes": b}})
    assert linear == pytest.approx(b * full / n) and 115 < linear / 2**30 < 125 and "bytes" in what
    cost.allow_fallbacks(False)
    cost.corpus_held("nq", 10, 100, csr_entries=12)
    cost.corpus_held("nq", 10, 200)
    assert cost.record("train", {"steps": 1}, 1.0)["held_corpora"] == {"nq": {"documents": 10, "bytes": 200}}
    cost.allow_fallbacks(False)


def _marked_job_pays_its_startup_once(stage, info, units):
    """A job of ``stage`` that marked the end of its start-up (cost.startup_done, 0.2 s in) and ran 1 s in
    all is priced steady: the start-up once, the rest over its ``units``. Leaves the process marked."""
    import time

    from harness import cost

    cost.allow_fallbacks(False)
    time.sleep(0.2)
    cost.startup_done()
    rec = cost.record(stage, info, 1.0)
    assert rec["pricing"] == "steady" and 0.2 <= rec["fixed_seconds"] < 0.5
    # fixed_seconds is kept to the millisecond: the rest per unit is within half of that over the units
    assert abs(rec["seconds_per_unit"] - (1.0 - rec["fixed_seconds"]) / units) <= 0.0005 / units + 1e-9


def test_the_hard_negatives_and_the_decontamination_are_priced_per_query(tmp_path):
    """The two shared jobs record their cost as the stage jobs do: the hard negatives per training
    question (BM25's top 100 over the slice's index: a lower bound at NQ's 21M passages), the
    decontamination per 1,000 queries hashed (training and test sets together); the estimate projects
    both to the paper profile's counts, and their ledger lines are keyed by the logs their rules write."""
    import json

    from harness import cost, estimate, ledger
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    cost.allow_fallbacks(False)
    (tmp_path / "negatives").mkdir()
    (tmp_path / "indexes/bm25/nq").mkdir(parents=True)
    (tmp_path / "indexes/bm25/nq/meta.json").write_text(json.dumps({"kind": "index", "documents": 2067}))
    (tmp_path / "negatives/nq.jsonl.meta.json").write_text(json.dumps(
        {"kind": "negatives", "job": "negatives", "dataset": "nq", "bytes": 906_000,
         "inputs": {"index": "results/rehearsal/indexes/bm25/nq"},
         "cost": cost.record("negatives", {"queries": 906}, 9.06)}))
    (tmp_path / "decontam").mkdir()
    (tmp_path / "decontam/meta.json").write_text(json.dumps(
        {"kind": "decontam", "job": "decontam", "bytes": {"table6.csv": 100, "train/nq.train.jsonl": 4_000},
         "cost": cost.record("decontam", {"queries": 4_000}, 2.0)}))
    rows = {r["stage"]: r for r in estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)}
    neg, dec = rows["negatives"], rows["decontam"]
    assert neg["how"].startswith("58,880 train queries") and abs(neg["seconds"] - 0.01 * 58880) < 1e-6
    assert neg["bound"] == "lower" and "each searched 2,067 documents here, 21,015,324 in the profile" in neg["how"]
    assert abs(neg["disk_gib"] - 906_000 * 58880 / 906 / 2**30) < 1e-3   # its file grows with the questions
    # the paper profile's decontamination: NQ's and MS MARCO's training questions against the test sets
    from harness import plan

    units, how = estimate.paper_units(paper, plan.get(paper).job("decontam", "decontam", None))
    assert units * 1000 == 58880 + 808731 + sum((300, 1406, 648, 323, 3452, 1000, 50, 6980))
    assert "2 training and 8 test sets" in how and dec["how"] == how
    assert abs(dec["seconds"] - 0.5 * units) < 1e-6 and "bound" not in dec
    assert abs(dec["disk_gib"] - 4_100 * units / 4 / 2**30) < 1e-3   # its bytes per file, summed, grow with its queries
    assert ledger.log_of("negatives", "negatives", "nq") == "logs/negatives/nq.log"
    assert ledger.log_of("decontam", "decontam", None) == "logs/decontam.log"
    lines = {ledger.log_of(*ledger.job_key(d)): ledger.entry(d) for d in ledger.measured_jobs(tmp_path)}
    assert set(lines) == {"logs/negatives/nq.log", "logs/decontam.log"} and lines["logs/decontam.log"]["bytes"] == 4_100
    # the negatives' job marks where its start-up (the JVM) ends: that is paid once, the rest per question
    _marked_job_pays_its_startup_once("negatives", {"queries": 100}, 100)
    # a mark left by a job before (a warm process, or a test) does not price a search steady: its seconds
    # are spread over its queries (the mark once leaked into the estimate page's test: 0.1 s a query -> 0.0)
    rec = cost.record("search", {"queries": 32}, 3.2)
    assert "pricing" not in rec and rec["seconds_per_unit"] == 0.1
    cost.allow_fallbacks(False)


def test_a_jobs_host_peak_counts_the_child_process_it_timed_in(tmp_path):
    """A measure job times each system in a fresh process (densephrases.measure._in_child); the job's
    peak must count that child's own, or the estimate books the job the parent's memory alone. And the
    child's own peak is its own: a fresh process's ``ru_maxrss`` starts at its parent's peak (a child
    holding nothing, spawned by a parent that held 300 MiB, reported 300 MiB). Run in a fresh
    interpreter from a file: the spawned children import their function from it."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import harness

    code = (
        "import json\n"
        "from harness import cost\n"
        "from harness.methods.densephrases.measure import _in_child\n"
        "def hold(cfg, n):\n"
        "    b = bytearray(n)\n"
        "    for i in range(0, n, 4096): b[i] = 1\n"
        "    return {'held': len(b)}\n"
        "if __name__ == '__main__':\n"
        "    cost.allow_fallbacks(False)\n"
        "    parent = bytearray(300 * 2**20)\n"
        "    for i in range(0, len(parent), 4096): parent[i] = 1\n"
        "    before = cost.peaks()\n"
        "    small = _in_child(hold, {}, 0)\n"
        "    big = _in_child(hold, {}, 400 * 2**20)\n"
        "    print(json.dumps([before, small['peak_rss'], big['peak_rss'], cost.peaks()]))\n")
    script = tmp_path / "job.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(Path(harness.__file__).resolve().parents[1])}  # this checkout's harness
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=300,
                         env=env)
    before, small, big, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert "host_children_peak_bytes" not in before
    assert before["host_peak_bytes"] >= 300 * 2**20                 # the parent's 300 MiB
    assert small < 300 * 2**20 <= 400 * 2**20 <= big                 # each child's own: not the parent's
    assert after["host_children_peak_bytes"] == big                   # the largest child
    assert after["host_peak_bytes"] == after["host_self_peak_bytes"] + big


def test_query_side_fine_tuning_is_counted_in_its_own_epochs_and_batches():
    """densephrases.qs trains with methods.densephrases.qs (10 epochs of batch 12 in the paper profile)
    over NQ's training questions, its data input: counted as such, not 'no train record count'."""
    from harness import estimate, plan
    from harness.config import load_config

    paper = load_config(["configs/profiles/paper.yaml"])
    units, how = estimate.paper_units(paper, plan.get(paper).job("train", "densephrases.qs", None))
    assert units == 10 * math.ceil(58880 / 12) and how.startswith("10 epochs x ceil(58,880 / 12)")
    assert "an upper bound on its steps" in how
    # the method's own training keeps its section's epochs and batch (4 epochs, 84 a batch)
    units, how = estimate.paper_units(paper, plan.get(paper).job("train", "densephrases", None))
    assert how.startswith("4 epochs x ceil(") and "upper bound" not in how


def test_qcrs_k_means_is_priced_per_1000_tokens_of_its_sample():
    """QCR's k-means baseline takes no optimizer step: its cost is its sample's tokens (encoded, then
    clustered into the same K over niter iterations: linear in them), per 1,000 (cost.TRAIN_TOKENS), and
    the paper profile's count is methods.qcr.kmeans.sample_tokens (50M), not the schedule's steps."""
    from harness import cost, estimate, plan
    from harness.config import load_config

    cost.allow_fallbacks(False)
    c = cost.record("train", {"tokens": 500_000, "clusters": 32000}, 100.0)
    assert (c["unit"], c["units"], c["seconds_per_unit"]) == ("1k tokens", 500.0, 0.2)
    assert cost.record("train", {"steps": 2, "tokens": 9}, 10.0)["unit"] == "step"   # steps first
    paper = load_config(["configs/profiles/paper.yaml"])
    units, how = estimate.paper_units(paper, plan.get(paper).job("train", "qcr.kmeans", None))
    assert units == 50_000 and how.startswith("50,000,000 tokens of msmarco's passages")


def test_an_index_table_paid_once_is_priced_once_and_a_probes_skipped_rows_projected(tmp_path):
    """LightRetriever's light document side builds its vocabulary's token-vector table once, whatever the
    corpus (``cost.paid_once``): priced with the index's start-up, not per document (spread over a slice's
    documents it would have over-projected by the corpus's ratio); a probe's 100 of 1,000 rows built in
    10 s project the other 900 at their mean (90 s), and the estimate's row says so."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    cost.startup_done()
    cost.paid_once(10.0, 100, 1000)
    rec = cost.record("index", {"documents": 500}, 20.0)
    assert rec["paid_once"] == {"seconds": 10.0, "rows_built": 100, "rows": 1000, "projected_seconds": 90.0}
    assert rec["seconds"] == 20.0 and rec["fixed_seconds"] == pytest.approx(100.0, abs=0.01)
    assert rec["seconds_per_unit"] == pytest.approx(10.0 / 0.5, abs=0.05)   # the other 10 s over 500 documents
    folder = tmp_path / "indexes/lightretriever.light-both/scifact"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"kind": "index", "job": "lightretriever.light-both",
                                                  "dataset": "scifact", "documents": 500, "cost": rec}))
    every = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, other_datasets=False, siblings=False)
    row = next(r for r in every if r["job"] == "lightretriever.light-both" and r["stage"] == "index" and r["dataset"] == "scifact")
    assert row["seconds"] == pytest.approx(rec["fixed_seconds"] + rec["seconds_per_unit"] * 5.183, rel=1e-6)
    assert "its token-vector table paid once: projected from 100 of its 1,000 rows built" in row["how"]


def test_a_probed_train_job_is_priced_with_its_projected_sub_batches_and_says_so(tmp_path):
    """A train job whose GradCache passes ran 2 of their 16 sub-batches (``probe_sub_batches``): its
    steps are priced with the skipped sub-batches' projected seconds (the later step: 10 s measured + 30 s
    projected), what it paid once as measured (a first step's warm-up projected over the sub-batches it
    skipped would count it 1 + skipped/run times), its measured seconds stay as they were, and its row
    says it was probed."""
    import json

    from harness import cost, estimate
    from harness.config import load_config

    cost.allow_fallbacks(False)
    for first, warm in ((True, 4.0), (False, 0.0)):   # the first step's first sub-batch warms up: 4 s more
        cost.probe_timed(10.0 + warm, 2, 4)   # 2 skipped sub-batches at the 2 run ones' mean: 10 s a pass
        cost.probe_timed(20.0, 2, 4)   # and 20 s for the second pass
        cost.step_timed(10.0 + warm, first=first, projected=cost.probe_step_done())
    rec = cost.record("train", {"steps": 2}, 29.0)
    assert rec["seconds"] == 29.0 and rec["probe"] == {"sub_batches_run": 8, "sub_batches": 16, "projected_seconds": 64.0,
                                                      "measured_step_seconds": [14.0, 10.0]}
    # paid once: 29 - 24 s of steps, + the first step's 4 s of warm-up as measured (not its 8 s projected)
    assert rec["seconds_per_unit"] == 40.0 and rec["fixed_seconds"] == 9.0
    (tmp_path / "models/dpr").mkdir(parents=True)
    (tmp_path / "models/dpr/meta.json").write_text(json.dumps({"kind": "model", "job": "dpr", "cost": rec}))
    every = estimate.estimate(load_config(["configs/profiles/paper.yaml"]), tmp_path, other_datasets=False, siblings=False)
    row = next(r for r in every if r["job"] == "dpr" and r["stage"] == "train")
    assert row["seconds"] == 9.0 + 40.0 * 40 * 460
    assert "projected from 8 of their 16 GradCache sub-batch passes run" in row["how"]


def test_the_estimate_refuses_a_results_folder_of_another_profile(tmp_path):
    """``--measured results/smoke`` would price the paper's jobs at the smoke profile's tiny encoders: a
    folder whose jobs ran under another profile (meta.json ``profile``; before it was written, the
    ``results/<profile>/`` its inputs were read from) is refused naming the profile and the fix; the
    rehearsal's own, the paper profile's, and a record that says neither, are read; the smoke profile's
    estimate reads the smoke profile's jobs (scripts/rehearsal_gpu.sh's test)."""
    import json

    import pytest

    from harness import cost, estimate
    from harness.config import load_config
    from harness.errors import DataError

    cost.allow_fallbacks(False)
    rec = cost.record("train", {"steps": 1}, 5.0)
    paper = load_config(["configs/profiles/paper.yaml"])
    meta = tmp_path / "models/dpr/meta.json"
    meta.parent.mkdir(parents=True)
    for extra, refused in (({"profile": "smoke"}, "profile smoke"),
                           ({"inputs": {"data_nq": "results/ci/data/nq"}}, "profile ci"),
                           ({"profile": "rehearsal", "inputs": {"data_nq": "results/rehearsal/data/nq"}}, None),
                           ({"profile": "paper"}, None), ({}, None)):
        meta.write_text(json.dumps({"kind": "model", "job": "dpr", "cost": rec, **extra}))
        if refused:
            with pytest.raises(DataError, match=refused) as e:
                estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)
            assert "configs/profiles/rehearsal.yaml" in str(e.value) and str(meta) in str(e.value)
        else:
            rows = estimate.estimate(paper, tmp_path, other_datasets=False, siblings=False)
            assert [(r["stage"], r["job"]) for r in rows] == [("train", "dpr")]
    meta.write_text(json.dumps({"kind": "model", "job": "dpr", "cost": rec, "profile": "smoke"}))
    assert len(estimate.rehearsal_jobs(tmp_path, "smoke")) == 1
