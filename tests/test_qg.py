"""Question generation for data augmentation (DensePhrases §4.1), end to end with a randomly
initialised tiny T5 and the harness's offline BERT tokenizer; NER and reader are injected fakes."""
from __future__ import annotations

import re

import pytest

from harness.datasets import Doc, Query
from harness.errors import ConfigError, DependencyError
from harness.methods.densephrases import qg

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SETTINGS = {"generator": "t5-large", "ner": "en_core_web_sm", "max_source_len": 96, "max_target_len": 12,
            "num_beams": 1, "highlight": "<hl>", "max_passages": None, "batch_size": 4}

PASSAGES = [
    Doc("p1", "Kanmor Works", "The works were founded by Edda Lind in Brenna near the river Olse."),
    Doc("p2", "Olse", "the river rises in the hills and flows past Brenna into the sea."),
    Doc("p3", "Lind", "Edda Lind studied in Paris and returned to Brenna, where Lind died."),
    Doc("p4", "nothing", "no capitalised word occurs in this passage at all."),
]


def cap_ner(text: str) -> list[tuple[int, int, str]]:
    """A stand-in for spaCy: maximal runs of capitalised words."""
    return [(m.start(), m.end(), "CAP") for m in re.finditer(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*", text)]


@pytest.fixture(scope="module")
def tokenizer():
    from harness.config import load_config
    from harness.models.backbones import load_tokenizer

    tok = load_tokenizer(load_config([]), "splade-tiny")
    assert qg.add_highlight_token(None, tok, "<hl>")  # BERT's vocabulary has no <hl>: added
    return tok


def tiny_t5(tokenizer, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_ff=64, d_kv=16, num_layers=1,
                                num_decoder_layers=1, num_heads=2, dropout_rate=0.0,
                                decoder_start_token_id=tokenizer.pad_token_id, pad_token_id=tokenizer.pad_token_id,
                                eos_token_id=tokenizer.sep_token_id)
    return transformers.T5ForConditionalGeneration(cfg)


def test_settings_from_config():
    s = qg.QGSettings.from_config(SETTINGS)
    assert (s.generator, s.max_source_len, s.num_beams, s.max_passages) == ("t5-large", 96, 1, None)
    assert qg.QGSettings.from_config(None) == qg.QGSettings()
    with pytest.raises(ConfigError, match="num_beam"):
        qg.QGSettings.from_config({"num_beam": 2})
    with pytest.raises(ConfigError, match="max_target_len"):
        qg.QGSettings.from_config({"max_target_len": 0})


def test_highlight_surrounds_exactly_the_span():
    text = PASSAGES[0].text
    start = text.index("Edda Lind")
    end = start + len("Edda Lind")
    src = qg.highlight(text, start, end, "<hl>", prefix="generate question: ")
    assert src == "generate question: The works were founded by <hl> Edda Lind <hl> in Brenna near the river Olse."
    body = src[len("generate question: "):]
    a, b = body.index("<hl>"), body.rindex("<hl>")
    assert body[a + len("<hl> "):b - 1] == text[start:end]
    assert body.replace("<hl> ", "", 1).replace(" <hl>", "", 1) == text
    assert qg.highlight("abc", 0, 3, "[A]") == "[A] abc [A]"
    with pytest.raises(ValueError):
        qg.highlight("abc", 2, 2, "<hl>")


def test_candidate_answers_from_an_injected_ner():
    texts = [d.text for d in PASSAGES]
    cands = qg.candidate_answers(texts, cap_ner)
    assert [[c[2] for c in cs] for cs in cands] == [
        ["The", "Edda Lind", "Brenna", "Olse"], ["Brenna"], ["Edda Lind", "Paris", "Brenna", "Lind"], []]
    for text, cs in zip(texts, cands):
        assert all(text[s:e] == a for s, e, a in cs)
    # dedupe keeps the first occurrence of a repeated entity text
    twice = qg.candidate_answers(["Brenna and Brenna"], cap_ner)
    assert twice == [[(0, 6, "Brenna")]]
    assert len(qg.candidate_answers(["Brenna and Brenna"], cap_ner, dedupe=False)[0]) == 2
    assert qg.candidate_answers(["Brenna x"], lambda t: [(0, 7, "GPE")], labels=["PERSON"]) == [[]]
    assert qg.candidate_answers([" Brenna x"], lambda t: [(0, 8, "GPE")]) == [[(1, 7, "Brenna")]]  # whitespace stripped


def test_long_passages_are_cut_around_the_answer(tokenizer):
    words = [f"w{i}" for i in range(400)]
    text = " ".join(words[:300] + ["Edda Lind"] + words[300:])
    start = text.index("Edda Lind")
    s = qg.QGSettings.from_config({**SETTINGS, "max_source_len": 64})
    src, cropped = qg.make_source(tokenizer, text, start, start + 9, s)
    assert cropped and "<hl> Edda Lind <hl>" in src and src.startswith("generate question: w")
    assert len(tokenizer(src)["input_ids"]) <= 64
    short, cut = qg.make_source(tokenizer, PASSAGES[0].text, 26, 35, s)
    assert not cut and "<hl> Edda Lind <hl>" in short


def test_pipeline_generates_once_per_candidate_and_keeps_what_the_reader_confirms(tokenizer):
    model = tiny_t5(tokenizer)
    s = qg.QGSettings.from_config(SETTINGS)
    calls: list[tuple[str, str]] = []

    def first_entity_reader(question: str, doc: Doc) -> str:  # answers with the passage's first entity
        calls.append((question, doc.id))
        found = cap_ner(doc.text)
        return doc.text[found[0][0]:found[0][1]] if found else ""

    kept, stats = qg.run_pipeline(PASSAGES, s, model=model, tokenizer=tokenizer, ner=cap_ner,
                                  predict=first_entity_reader)
    cands = [(d, c) for d, cs in zip(PASSAGES, qg.candidate_answers([d.text for d in PASSAGES], cap_ner)) for c in cs]
    sources = [qg.make_source(tokenizer, d.text, c[0], c[1], s)[0] for d, c in cands]
    questions = qg.generate(model, tokenizer, sources, s)  # greedy: the same generations again
    assert stats["passages"] == 4 and stats["passages_without_candidates"] == 1
    assert stats["candidates"] == stats["generated"] == len(cands) == len(questions) == 9
    assert stats["empty"] + stats["checked"] == stats["generated"]
    assert stats["kept"] + stats["rejected"] == stats["checked"] == len(calls)
    assert [q for q, _ in calls] == [q for q in questions if q]
    expected = [(d.id, q, c[2], c[0], c[1]) for (d, c), q in zip(cands, questions)
                if q and c == qg.candidate_answers([d.text], cap_ner)[0][0]]
    assert [tuple(k) for k in kept] == expected and stats["kept"] == len(expected) > 0
    texts = {d.id: d.text for d in PASSAGES}
    assert all(texts[k.passage_id][k.start:k.end] == k.answer for k in kept)
    # max_passages: a seeded subsample
    _, sub = qg.run_pipeline(PASSAGES, {**SETTINGS, "max_passages": 2}, model=model, tokenizer=tokenizer,
                             ner=cap_ner, predict=first_entity_reader, seed=3)
    assert sub["passages"] == 2


def test_filter_drops_empty_questions_without_asking_the_reader():
    doc = PASSAGES[0]
    pairs = [qg.Candidate(doc, 26, 35, "Edda Lind", "who founded the works?"),
             qg.Candidate(doc, 39, 45, "Brenna", "  "),
             qg.Candidate(doc, 39, 45, "Brenna", "where were the works founded?")]
    asked = []

    def reader(question, d):
        asked.append(question)
        return "the Edda Lind."  # EM normalises articles and punctuation

    kept, stats = qg.filter_by_reader(pairs, reader)
    assert asked == ["who founded the works?", "where were the works founded?"]
    assert kept == [qg.GeneratedQuestion("p1", "who founded the works?", "Edda Lind", 26, 35)]
    assert stats == {"generated": 3, "empty": 1, "checked": 2, "kept": 1, "rejected": 1}


def test_train_generator_lowers_the_loss_on_a_memorisation_set(tokenizer, tmp_path):
    model = tiny_t5(tokenizer, seed=1)
    s = qg.QGSettings.from_config(SETTINGS)
    docs = {d.id: d for d in PASSAGES}
    queries = [Query("q1", "who founded the works?", ["Edda Lind"], ["p1"]),
               Query("q2", "where does the river flow?", ["Brenna"], ["p2"]),
               Query("q3", "where did lind study?", ["Paris"], ["p3"]),
               Query("q4", "what is missing?", ["nowhere"], ["p4"]),
               Query("q5", "no gold passage?", ["x"], None)]
    examples, ex_stats = qg.training_examples(queries, docs)
    assert ex_stats == {"questions": 5, "no_gold": 1, "no_answer_span": 1, "examples": 3}
    assert examples[0] == qg.QGExample(PASSAGES[0].text, 26, 35, "who founded the works?")
    info = qg.train_generator(model, tokenizer, examples, s,
                              {"epochs": 40, "batch_size": 3, "lr": 1e-2, "warmup_ratio": 0.0, "log_every": 1000},
                              seed=0, out=tmp_path / "qg")
    assert info["steps"] == 40
    first, last = sum(info["loss_first"]) / 5, sum(info["loss_last"]) / 5
    assert last < 0.5 * first, (first, last)
    assert (tmp_path / "qg" / "loss.tsv").is_file() and (tmp_path / "qg" / "generator" / "config.json").is_file()


def test_availability_gives_reasons_and_never_raises(tmp_path, tokenizer):
    reason = qg.availability({"generator": "harness-test/no-such-generator", "ner": "no_such_spacy_model"})
    assert reason.startswith("question generation not run: ")
    assert "'harness-test/no-such-generator' is not available offline" in reason
    assert "no_such_spacy_model" in reason and reason.count(".") <= 1
    missing = qg.availability({"generator": str(tmp_path / "absent"), "ner": "en_core_web_sm"})
    assert "does not exist" in missing
    assert qg.availability(qg.QGSettings(generator="///")) is not None
    assert "not available offline" in qg.availability({"generator": "not a valid/hub id!"})
    # a saved local generator is available (the spaCy part may still be missing here)
    folder = tmp_path / "gen"
    tiny_t5(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert qg.generator_reason(str(folder)) is None
    assert qg.generator_reason(f"path:{folder}") is None
    model, tok = qg.load_generator({"generator": str(folder)})
    assert tok.tokenize("a <hl> b") == ["a", "<hl>", "b"] and len(tok) == model.config.vocab_size
    with pytest.raises(DependencyError, match="not available offline"):
        qg.load_generator({"generator": "harness-test/no-such-generator"})
    with pytest.raises(DependencyError):
        qg.spacy_ner("no_such_spacy_model")
