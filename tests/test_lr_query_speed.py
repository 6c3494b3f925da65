"""The LightRetriever query-speed timers (harness/bench/lr_query_speed.py) on tiny models."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.bench import BENCHMARKS
from harness.bench import lr_query_speed as lq


@pytest.fixture(scope="module")
def tokenizer():
    from harness.config import load_config
    from harness.models.backbones import load_tokenizer

    return load_tokenizer(load_config(), "splade-tiny")


@pytest.fixture(scope="module")
def tiny_llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaModel(cfg).eval()


@pytest.fixture(scope="module")
def tiny_bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, max_position_embeddings=128)
    return BertModel(cfg).eval()


TEXTS = ["what is a lookup table", "who wrote the paper", "speed of light", "cached query vectors"]


def test_registered():
    assert BENCHMARKS.get("lr-query-speed") == "harness.bench.lr_query_speed"


def test_cycle_queries_order_and_length():
    assert lq.cycle_queries(["a", "b", "c"], 7) == ["a", "b", "c", "a", "b", "c", "a"]
    assert lq.cycle_queries(["a", "b"], 1) == ["a"]
    assert len(lq.cycle_queries(["x"])) == 65536
    with pytest.raises(ValueError):
        lq.cycle_queries([], 4)


def test_eos_pool_takes_last_non_pad_position():
    hidden = torch.zeros(3, 4, 2)
    for b in range(3):
        for t in range(4):
            hidden[b, t] = torch.tensor([float(10 * b + t + 1), 1.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    out = lq.eos_pool(hidden, mask)
    expected = torch.stack([hidden[0, 2], hidden[1, 0], hidden[2, 3]])
    expected = expected / expected.norm(dim=-1, keepdim=True)
    assert torch.allclose(out, expected)
    assert torch.allclose(out.norm(dim=-1), torch.ones(3))


def test_time_light_counts_queries_and_bytes():
    table = lq.random_table(50, 8)
    ids = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10], [11]]
    res = lq.time_light(table, ids, batch_size=2, repeats=2)
    assert res["queries"] == 5
    assert res["tokens"] == 11
    assert res["bytes_read"] == 11 * 8 * 4
    assert res["seconds"] == min(res["passes"]) and len(res["passes"]) == 2
    # one timer per batch on the CPU: the best pass is the sum of its batches (a claim's bootstrap reads them)
    assert len(res["batch_seconds"]) == 3 and sum(res["batch_seconds"]) == res["seconds"]
    # the inputs reproduce the mean of each query's rows
    flat, offsets = lq.light_inputs(ids, 2)[1]
    assert torch.allclose(table(flat, offsets)[0], table.weight[[5, 6]].mean(0))


def test_time_full_projects_linearly(tiny_llama, tokenizer):
    texts = lq.cycle_queries(TEXTS, 12)
    res = lq.time_full(tiny_llama, tokenizer, texts, batch_size=4, budget_s=0, warmup_batches=1)
    assert res["kind"] == "projected"
    assert res["batches_timed"] == 1 and res["queries_timed"] == 4
    assert res["seconds"] == pytest.approx(res["measured_seconds"] / 4 * 12)
    full = lq.time_full(tiny_llama, tokenizer, texts, batch_size=4)
    assert full["kind"] == "measured" and full["queries_timed"] == 12 and full["batches_timed"] == 3
    assert full["seconds"] == full["measured_seconds"] == sum(full["batch_seconds"])
    assert len(full["batch_seconds"]) == 3
    # the rehearsal's probe: the first 2 queries of each batch of 4 timed, projected per query to all 12
    part = lq.time_full(tiny_llama, tokenizer, texts, batch_size=4, sub_batch=2)
    assert part["kind"] == "projected" and part["sub_batch"] == 2
    assert part["batches_timed"] == 3 and part["queries_timed"] == 6
    assert part["seconds"] == pytest.approx(part["measured_seconds"] / 6 * 12)
    assert "the first 2 of each batch of 4" in part["note"]
    whole = lq.time_full(tiny_llama, tokenizer, texts, batch_size=4, sub_batch=4)   # not below the batch: whole
    assert whole["kind"] == "measured" and whole["sub_batch"] is None and whole["queries_timed"] == 12
    with pytest.raises(ValueError, match="sub_batch"):
        lq.time_full(tiny_llama, tokenizer, texts, batch_size=4, sub_batch=0)


def test_time_full_bert_and_tokenize(tiny_bert, tokenizer):
    res = lq.time_full(tiny_bert, tokenizer, TEXTS, batch_size=3)
    assert res["kind"] == "measured" and res["queries_timed"] == 4
    assert lq.time_tokenize(tokenizer, TEXTS, 2) > 0


def test_light_token_ids_skip_special_tokens(tokenizer):
    ids = lq.light_token_ids(tokenizer, ["speed of light", "speed of light"], vocab=None)
    assert ids[0] == ids[1] == tokenizer("speed of light", add_special_tokens=False)["input_ids"]
    assert tokenizer.cls_token_id not in ids[0] and tokenizer.sep_token_id not in ids[0]
    assert all(0 <= t < 100 for t in lq.light_token_ids(tokenizer, ["speed of light"], vocab=100)[0])


def test_speed_table_rows_without_gpu(tiny_llama, tokenizer):
    table = lq.random_table(1000, 32)
    rows = lq.speed_table(TEXTS, tokenizer=tokenizer, full_model=tiny_llama, table=table, batch_sizes=(2, 4),
                          n_queries=8, gpu=False, light_repeats=1, bandwidth=1e9)
    assert [r["batch_size"] for r in rows] == [2, 4]
    for r in rows:
        assert r["queries"] == 8
        assert r["full_gpu_s"] is None and r["light_gpu_s"] is None and r["full_gpu_kind"] is None
        assert r["speedup_gpu"] is None and r["speedup_gpu_vs_light_cpu"] is None
        assert r["full_cpu_kind"] == "measured" and r["full_cpu_s"] > 0 and r["light_cpu_s"] > 0
        assert r["speedup_cpu"] == pytest.approx(r["full_cpu_s"] / r["light_cpu_s"])
        num, den = r["speedup_cpu_batches"]   # the same batches on both sides, summing to the speedup
        assert len(num) == len(den) == 8 // r["batch_size"]
        assert sum(num) / sum(den) == pytest.approx(r["speedup_cpu"], rel=1e-12)
        assert r["bytes_read"] == r["tokens"] * 32 * 4
        assert r["bound_s"] == pytest.approx(r["bytes_read"] / 1e9)
    res = lq.targets(rows)
    assert set(res) == {"a", "b"} and res["b"]["batch_size"] == 4
    assert all(r["full_sub_batch"] is None for r in rows)
    cut = lq.speed_table(TEXTS, tokenizer=tokenizer, full_model=tiny_llama, table=table, batch_sizes=(2, 4),
                         n_queries=8, gpu=False, light_repeats=1, bandwidth=1e9, full_sub_batch=2)
    assert [(r["full_sub_batch"], r["full_cpu_kind"], r["full_cpu_queries_timed"]) for r in cut] == \
        [(None, "measured", 8), (2, "projected", 4)]
    assert "batch" in lq.format_table(rows)


def test_speed_table_without_full_model(tokenizer):
    rows = lq.speed_table(TEXTS, tokenizer=tokenizer, full_model=None, table=lq.random_table(30522, 8),
                          batch_sizes=(4,), n_queries=4, gpu=False, light_repeats=1, bandwidth=1e9)
    assert rows[0]["full_cpu_s"] is None and rows[0]["speedup_cpu"] is None and rows[0]["speedup_cpu_batches"] is None
    assert lq.targets(rows)["a"]["pass"] is None


def test_fits_in_memory_refuses_absurd_config():
    from transformers import LlamaConfig

    absurd = LlamaConfig(vocab_size=32000, hidden_size=65536, intermediate_size=262144, num_hidden_layers=64,
                         num_attention_heads=64, num_key_value_heads=64)
    ok, why = lq.fits_in_memory(absurd, torch.float32)
    assert not ok and "available" in why
    small = LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=2)
    assert lq.fits_in_memory(small, torch.float32, available=64 * 2**30)[0]


def test_paper_shapes_parameter_counts():
    # the released models' sizes (base model, no LM head): shapes are right
    assert lq.param_count(lq.PAPER_SHAPES["llama-3.2-1b"]) == pytest.approx(1.236e9, rel=0.01)
    assert lq.param_count(lq.PAPER_SHAPES["mistral-7b"]) == pytest.approx(7.11e9, rel=0.01)
    assert lq.param_count(lq.PAPER_SHAPES["qwen2.5-1.5b"]) == pytest.approx(1.54e9, rel=0.01)


def test_main_bad_arguments_exit_2(capsys):
    assert lq.main(["--shape", "llama-3b"]) == 2
    assert "--shape" in capsys.readouterr().err
    assert lq.main(["--batch-sizes", "16,x"]) == 2
    assert lq.main(["--queries", "0"]) == 2


def test_uniform_ids_like_keeps_lengths():
    ids = [[1, 2, 3], [], [4, 5]]
    out = lq.uniform_ids_like(ids, vocab=7)
    assert [len(x) for x in out] == [3, 0, 2]
    assert all(0 <= t < 7 for x in out for t in x)
