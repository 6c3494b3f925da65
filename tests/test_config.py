"""Config loading, merging and validation (harness.config)."""
from __future__ import annotations

import copy

import pytest

from harness.config import REPO, deep_merge, dump, load_config, read_yaml, section_hash
from harness.errors import ConfigError

PROFILES = REPO / "configs" / "profiles"


# --------------------------------------------------------------------------- valid configs

def test_default_config_is_smoke_and_validates():
    cfg = load_config()
    assert cfg["profile"] == "smoke"
    assert "smoke" in cfg["datasets"]
    assert set(cfg["methods"]) >= {"bm25", "dpr"}


@pytest.mark.parametrize("name", ["small.yaml", "paper.yaml"])
def test_profile_overlays_validate(name):
    path = PROFILES / name
    if not path.exists():
        pytest.skip(f"{path} does not exist yet")
    cfg = load_config([path])
    assert cfg["profile"] == name.removesuffix(".yaml")


def test_gpu_overlay_trains_every_trained_method_in_bf16_on_cuda():
    """configs/profiles/gpu.yaml: every section with a precision key (every trained method, the reader)
    trains on cuda in bf16 and asks a cluster for a GPU; the measure jobs time their GPU cells; the
    results land apart from the fp32 ones."""
    from harness.methods.base import wants_gpu
    from harness.settings import results_root

    for over in ([PROFILES / "gpu.yaml"], [PROFILES / "small.yaml", PROFILES / "gpu.yaml"]):
        cfg = load_config(over)
        trained = {m: sec for m, sec in {**cfg["methods"], "reader": cfg["reader"]}.items() if "precision" in sec}
        assert set(trained) >= {"dpr", "svdr", "vdr", "bpr", "qcr", "lightretriever", "densephrases", "reader"}
        assert {(sec["device"], sec["precision"]) for sec in trained.values()} == {("cuda", "bf16")}
        assert all(wants_gpu(cfg, m) for m in trained)
        assert cfg["timing"]["device"] == "cuda" and results_root(cfg).name == "gpu"


def test_paths_then_overrides_merge_order(tmp_path):
    over = tmp_path / "over.yaml"
    over.write_text("seed: 99\nmethods:\n  dpr:\n    lr: 0.5\n", encoding="utf-8")
    cfg = load_config([over])
    assert cfg["seed"] == 99
    assert cfg["methods"]["dpr"]["lr"] == 0.5
    # untouched neighbours keep the defaults
    default = load_config()
    assert cfg["methods"]["dpr"]["batch_size"] == default["methods"]["dpr"]["batch_size"]
    assert cfg["methods"]["bm25"] == default["methods"]["bm25"]
    # overrides win over files
    cfg2 = load_config([str(over)], overrides={"seed": 7})
    assert cfg2["seed"] == 7
    assert cfg2["methods"]["dpr"]["lr"] == 0.5


def test_load_config_does_not_share_state_between_calls():
    a = load_config()
    a["methods"]["dpr"]["lr"] = 123.0
    a["seed"] = -1
    b = load_config()
    assert b["methods"]["dpr"]["lr"] != 123.0
    assert b["seed"] != -1


# --------------------------------------------------------------------------- errors for people

def test_misspelled_top_level_key():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"seeed": 1})
    msg = str(exc.value)
    assert "'seeed'" in msg
    assert "did you mean 'seed'" in msg
    # lists the allowed keys
    allowed = msg.split("allowed keys:")[1]
    for key in ("seed", "methods", "datasets", "evaluate", "timing", "profile"):
        assert key in allowed


def test_misspelled_nested_key_names_path_and_suggestion():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods": {"dpr": {"batchsize": 4}}})
    msg = str(exc.value)
    assert "'batchsize'" in msg
    assert "methods.dpr" in msg
    assert "did you mean 'batch_size'" in msg
    assert "batch_size" in msg.split("allowed keys:")[1]


def test_unknown_method_name_is_refused():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods": {"dprr": {"enabled": True}}})
    msg = str(exc.value)
    assert "'dprr'" in msg and "methods" in msg and "did you mean 'dpr'" in msg


def test_wrong_type_names_path():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods": {"dpr": {"batch_size": "big"}}})
    msg = str(exc.value)
    assert "methods.dpr.batch_size" in msg
    assert "'big'" in msg and "integer" in msg


def test_out_of_range_value_names_path():
    with pytest.raises(ConfigError, match=r"methods\.bm25\.b\b"):
        load_config(overrides={"methods": {"bm25": {"b": 1.5}}})


def test_unknown_backbone_suggests_close_name():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods": {"dpr": {"backbone": "splade-tinny"}}})
    msg = str(exc.value)
    assert "methods.dpr.backbone" in msg
    assert "'splade-tinny'" in msg
    assert "did you mean 'splade-tiny'" in msg


def test_unknown_dataset_in_method_datasets():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods": {"bm25": {"datasets": ["smoke", "nq-open"]}}})
    msg = str(exc.value)
    assert "methods.bm25.datasets" in msg
    assert "'nq-open'" in msg


def test_unknown_train_dataset_and_substitution():
    with pytest.raises(ConfigError, match="methods.dpr.train_dataset"):
        load_config(overrides={"methods": {"dpr": {"train_dataset": "nope"}}})
    with pytest.raises(ConfigError, match="substitutions.NQ"):
        load_config(overrides={"substitutions": {"NQ": "nope"}})


def test_a_profile_withdraws_a_stand_in_an_earlier_file_gave_a_label_with_null(tmp_path):
    """configs/default.yaml maps SQuAD and BEIR to the smoke fixture; the paper profile has no stand-in for
    either and drops them with null (its tables read the reason, not 'densephrases is not run on smoke')."""
    paper = PROFILES / "paper.yaml"
    cfg = load_config([paper])
    assert cfg["substitutions"]["SQuAD"] is None and "SQuAD" in cfg["tables"]["unavailable"]
    resolved = tmp_path / "config.yaml"  # what a workflow run writes and every job reads, merged on the default
    dump(cfg, resolved)
    assert load_config([resolved])["substitutions"]["SQuAD"] is None
    with pytest.raises(ConfigError, match=r"substitutions.SQuAD gives SQuAD the stand-in 'nq', and "
                                          r"tables.unavailable.SQuAD says this profile has none.*null"):
        load_config([paper], overrides={"substitutions": {"SQuAD": "nq"}})
    wired = load_config([paper], overrides={"substitutions": {"SQuAD": "nq"}, "tables.unavailable.SQuAD": None})
    assert wired["substitutions"]["SQuAD"] == "nq" and wired["tables"]["unavailable"]["SQuAD"] is None


def test_a_mean_over_sets_stands_in_for_a_label_and_names_each_set_it_reads(tmp_path):
    """substitutions.<label>: {mean_of: [keys]} (the paper profile's BEIR averages) replaces the default's
    one stand-in and survives the resolved config; an unknown set or a mean of one is refused by key."""
    paper = PROFILES / "paper.yaml"
    cfg = load_config([paper])
    assert cfg["substitutions"]["BEIR"] == {"mean_of": ["scifact", "arguana", "fiqa", "nfcorpus", "scidocs"]}
    assert cfg["substitutions"]["BEIR-12-average"]["mean_of"] == cfg["methods"]["svdr"]["datasets"][1:]
    resolved = tmp_path / "config.yaml"
    dump(cfg, resolved)
    assert load_config([resolved])["substitutions"]["BEIR"] == cfg["substitutions"]["BEIR"]
    with pytest.raises(ConfigError, match=r"substitutions.BEIR.mean_of: unknown dataset 'nope'"):
        load_config([paper], overrides={"substitutions": {"BEIR": {"mean_of": ["scifact", "nope"]}}})
    with pytest.raises(ConfigError, match="substitutions"):
        load_config([paper], overrides={"substitutions": {"BEIR": {"mean_of": ["scifact"]}}})


def _unexplained_labels(cfg):
    """{paper dataset label: tables} whose cells the profile's tables leave with neither a stand-in nor a
    reason (harness.tables.matrix.resolve_table, every table of every paper)."""
    from harness.measured import no_stand_in
    from harness.published import PAPERS
    from harness.tables import matrix

    unavailable = cfg["tables"].get("unavailable", {})
    out: dict[str, set[str]] = {}
    for paper in PAPERS:
        for table in matrix.published(paper)["tables"]:
            tmatrix = matrix.load_matrix(paper)["tables"].get(table["id"], {})
            for c in matrix.resolve_table(cfg, paper, table["id"])[1]:
                label = matrix.column_spec(c.column, tmatrix)["dataset"]
                if c.kind == "not run" and not unavailable.get(label) and c.reason == no_stand_in(cfg, label):
                    out.setdefault(label, set()).add(f"{paper} {table['id']}")
    return out


@pytest.mark.parametrize("files", [["small.yaml"], ["paper.yaml"], ["paper.yaml", "rehearsal.yaml"],
                                   ["paper.yaml", "scale.yaml"]])
def test_every_paper_dataset_label_a_real_profiles_tables_read_has_a_stand_in_or_a_reason(files):
    """A measured cell's column names a paper dataset (NQ, BEIR, SQuAD): the profile maps it to one of its
    datasets (substitutions) or says why it has none (tables.unavailable); the smoke fixture, which
    stands in for a few, is exempt."""
    assert _unexplained_labels(load_config([PROFILES / f for f in files])) == {}


def test_unknown_answer_rule_and_paper_are_named_with_the_known_ones():
    """The schema leaves these names to their registries (workflow/ names no paper or method)."""
    with pytest.raises(ConfigError, match=r"datasets.smoke.answer_rule: unknown answer rule 'dpr-strng' "
                                          r"\(did you mean 'dpr-string'\?\).*dpr-regex"):
        load_config(overrides={"datasets.smoke.answer_rule": "dpr-strng"})
    with pytest.raises(ConfigError, match=r"paper_settings.bprr: unknown paper 'bprr' \(did you mean 'bpr'\?\)"):
        load_config(overrides={"paper_settings": {"bprr": {}}})


@pytest.mark.parametrize("text, line", [
    ("profile: small\nseed: 3 : 4\nfoo: 1\n", 2),            # mapping values not allowed (line 2)
    ("a: 1\nb: 2\n\tc: 3\n", 3),                               # a tab cannot start a token (line 3)
])
def test_yaml_syntax_error_names_file_and_line(tmp_path, text, line):
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config([path])
    assert f"{path}:{line}" in str(exc.value)
    with pytest.raises(ConfigError, match=f"{path.name}:{line}"):
        read_yaml(path)


def test_missing_config_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_config([path])


def test_top_level_must_be_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="list.yaml"):
        load_config([path])


# --------------------------------------------------------------------------- section_hash

def test_section_hash_changes_only_with_its_section():
    cfg = load_config()
    h = section_hash(cfg, "methods.dpr")
    assert len(h) == 12 and all(c in "0123456789abcdef" for c in h)
    # stable: same content, fresh copy
    assert section_hash(copy.deepcopy(cfg), "methods.dpr") == h
    # another section changed -> same hash
    other = copy.deepcopy(cfg)
    other["methods"]["bm25"]["k1"] = 1.2
    other["seed"] = cfg["seed"] + 1
    assert section_hash(other, "methods.dpr") == h
    # the section changed -> different hash
    changed = copy.deepcopy(cfg)
    changed["methods"]["dpr"]["lr"] = cfg["methods"]["dpr"]["lr"] * 2
    assert section_hash(changed, "methods.dpr") != h
    # a new key inside the section also changes it
    added = copy.deepcopy(cfg)
    added["methods"]["dpr"]["extra"] = 1
    assert section_hash(added, "methods.dpr") != h


def test_section_hash_key_order_and_several_sections():
    a = {"x": {"p": 1, "q": [1, 2]}, "y": {"r": "s"}}
    b = {"y": {"r": "s"}, "x": {"q": [1, 2], "p": 1}}       # same content, other insertion order
    assert section_hash(a, "x") == section_hash(b, "x")
    assert section_hash(a, "x", "y") == section_hash(b, "x", "y")
    assert section_hash(a, "x", "y") != section_hash(a, "x")
    c = copy.deepcopy(a)
    c["y"]["r"] = "t"
    assert section_hash(c, "x") == section_hash(a, "x")
    assert section_hash(c, "x", "y") != section_hash(a, "x", "y")
    # list order is content
    d = copy.deepcopy(a)
    d["x"]["q"] = [2, 1]
    assert section_hash(d, "x") != section_hash(a, "x")
    # dotted leaf keys work
    assert section_hash(a, "x.p") != section_hash(d, "x.q")
    assert section_hash(a, "x.p") == section_hash(d, "x.p")


# --------------------------------------------------------------------------- deep_merge

def test_deep_merge_semantics():
    base = {"a": 1, "n": {"x": 1, "y": {"z": 2, "w": 3}}, "l": [1, 2], "d": {"k": 1}, "s": 5}
    over = {"n": {"y": {"z": 20}, "new": True}, "l": [3], "d": None, "s": {"now": "dict"}, "b": 2}
    base_before = copy.deepcopy(base)
    over_before = copy.deepcopy(over)
    out = deep_merge(base, over)
    assert out == {
        "a": 1,                                              # kept
        "n": {"x": 1, "y": {"z": 20, "w": 3}, "new": True},  # merged recursively
        "l": [3],                                            # lists are replaced, not appended
        "d": None,                                           # None replaces a dict
        "s": {"now": "dict"},                                # a dict replaces a scalar
        "b": 2,                                              # added
    }
    # inputs untouched, output shares no mutable parts with them
    assert base == base_before and over == over_before
    out["n"]["y"]["w"] = 99
    out["s"]["now"] = "changed"
    assert base["n"]["y"]["w"] == 3 and over["s"]["now"] == "dict"


def test_deep_merge_scalar_replaces_dict_and_empty_over():
    assert deep_merge({"a": {"b": 1}}, {"a": 3}) == {"a": 3}
    assert deep_merge({"a": {"b": 1}}, {}) == {"a": {"b": 1}}
    assert deep_merge({}, {"a": {"b": 1}}) == {"a": {"b": 1}}
    assert deep_merge({"a": {"b": 1}}, {"a": {}}) == {"a": {"b": 1}}


def test_paper_profile_takes_no_smoke_value_from_default_yaml():
    """configs/default.yaml is the smoke profile; a method setting it sizes for smoke and the paper
    profile leaves unset (or sets to {}, which merges) reaches the paper profile. Every such leaf (every
    section but the dataset cards) must be the schema's own default, and no ``variant_overrides`` entry
    may come from default.yaml: the paper profile once trained SVDR's App. C ablations and
    LightRetriever's seven LLM variants on 64 questions for 1 epoch, DensePhrases with smoke's warm-up
    and a coarse quantizer on 50 %, because ``variant_overrides: {}`` kept default.yaml's entries."""
    from harness.config import load_schema

    default = read_yaml(REPO / "configs" / "default.yaml")
    paper = read_yaml(REPO / "configs" / "profiles" / "paper.yaml")
    found: list[str] = []

    def walk(d, p, sch, path):
        for k, v in d.items():
            sub = (sch.get("properties") or {}).get(k, {}) if isinstance(sch, dict) else {}
            if k == "variants" or path == [] and k == "datasets":
                continue                       # the variants' names and the dataset cards: structure, not sizes
            if isinstance(v, dict) and isinstance(p.get(k), dict):
                walk(v, p[k], sub, path + [k])
            elif k not in p and ("variant_overrides" in path or ("default" in sub and sub["default"] != v)):
                found.append(f"{'.'.join(path + [k])}: {v!r} (schema default {sub.get('default', '-')!r})")

    walk(default, paper, load_schema("config"), [])
    assert not found, "paper profile inherits smoke values from configs/default.yaml:\n" + "\n".join(found)
