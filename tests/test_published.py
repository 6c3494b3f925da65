"""configs/published/<paper>.yaml: schema, integrity, CLI, and a transcription check against the paper texts.

The transcription check re-reads cells straight from ../shared/papers/<paper>.md: it finds a table's line
by a sequence of anchor regexes (caption or header first, then the row label), takes the numbers on that
line in order, and compares the chosen one with the YAML record, both as a number and as the literal
written in the YAML file (so 46.0 may not become 46).
"""

from __future__ import annotations

import copy
import csv
import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness import published as pub

REPO = Path(__file__).resolve().parents[1]
PAPERS_DIR = REPO.parent / "shared" / "papers"
PUBLISHED = REPO / "configs" / "published"

SOURCES = {
    "svdr": "svdr-binary-token-index.md",
    "bpr": "bpr-binary-passage-retriever.md",
    "densephrases": "densephrases.md",
    "qcr": "qcr-quantised-codebooks.md",
    "lightretriever": "lightretriever.md",
}

REQUIRED_TABLES = {
    "svdr": {"1", "2", "3", "4", "5", "fig3-ablation", "text"},
    "bpr": {"1", "2", "3", "4", "5", "7", "8", "9", "text"},
    "densephrases": {"1", "2", "3", "4", "5", "6", "7", "A.1", "C.3"},
    "qcr": {"1"},
    "lightretriever": {"1", "2", "3", "4", "5", "6", "8", "9", "10", "text"},
}


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {p: pub.load_published(p) for p in pub.PAPERS}


# ----------------------------------------------------------------------------- integrity


@pytest.mark.parametrize("paper", pub.PAPERS)
def test_file_is_valid_and_consistent(paper: str) -> None:
    doc = pub.load_published(paper)
    assert doc["paper"] == paper
    assert doc["source"] == SOURCES[paper]
    assert doc["records"], paper


@pytest.mark.parametrize("paper", pub.PAPERS)
def test_required_tables_present(docs: dict[str, dict], paper: str) -> None:
    ids = set(pub.table_ids(docs[paper]))
    missing = REQUIRED_TABLES[paper] - ids
    assert not missing, f"{paper}: missing tables {sorted(missing)}"


@pytest.mark.parametrize("paper", pub.PAPERS)
def test_every_declared_table_has_records_and_cells_are_unique(docs: dict[str, dict], paper: str) -> None:
    doc = docs[paper]
    keys = [(r["table"], r["row"], r["column"]) for r in doc["records"]]
    assert len(keys) == len(set(keys))
    for t in doc["tables"]:
        recs = [r for r in doc["records"] if r["table"] == t["id"]]
        assert recs, f"{paper} table {t['id']} has no records"
        used_rows = {r["row"] for r in recs}
        assert used_rows == set(t["rows"]), f"{paper} table {t['id']}: rows without records"


@pytest.mark.parametrize("paper", pub.PAPERS)
def test_measures_follow_the_harness_conventions(docs: dict[str, dict], paper: str) -> None:
    for r in docs[paper]["records"]:
        m = r.get("measure")
        if m is None:
            continue
        assert not re.match(r"(?i)(top-?\d|acc@|recall@|mrr|ndcg-)", m), (
            f"{paper}: non-canonical measure {m!r}"
        )
        if re.search(r"\btop ?\d+\b", r["column"]) and r["unit"] == "%":
            assert m.startswith("Success@"), f"{paper}: top-k accuracy cell {r} should be Success@k"


def _copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "published"
    shutil.copytree(PUBLISHED, root)
    return root


def _rewrite(root: Path, paper: str, mutate) -> None:
    path = root / f"{paper}.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")


def test_duplicate_record_is_refused(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    _rewrite(root, "qcr", lambda d: d["records"].append(copy.deepcopy(d["records"][3])))
    with pytest.raises(ConfigError, match=r"duplicate cell.*qcr\.yaml|qcr\.yaml.*duplicate cell"):
        pub.load_published("qcr", root)


def test_undeclared_row_and_column_are_refused(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    _rewrite(root, "qcr", lambda d: d["records"][0].update(row="No such system"))
    with pytest.raises(ConfigError, match="row 'No such system' is not declared"):
        pub.load_published("qcr", root)
    root = _copy_tree(tmp_path / "b")
    _rewrite(root, "qcr", lambda d: d["records"][0].update(column="nDCG@11"))
    with pytest.raises(ConfigError, match="column 'nDCG@11' is not declared"):
        pub.load_published("qcr", root)


def test_schema_violation_names_file_and_record(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    _rewrite(root, "qcr", lambda d: d["records"][2].update(unit="percent"))
    with pytest.raises(ConfigError, match=r"qcr\.yaml: schema error at records/2/unit") as exc:
        pub.load_published("qcr", root)
    assert "in record" in str(exc.value)


def test_unknown_paper_and_table_name_the_valid_ones(docs: dict[str, dict]) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'svdr'"):
        pub.load_published("svdrr")
    with pytest.raises(ConfigError, match=r"known: .*fig3-ablation"):
        pub.get_table(docs["svdr"], "fig3")
    with pytest.raises(ConfigError, match="did you mean 'A.1'"):
        pub.main(["--paper", "densephrases", "--table", "A1", "--format", "csv"])


# ----------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("paper", pub.PAPERS)
def test_cli_csv_header_and_row_count(
    docs: dict[str, dict], paper: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert pub.main(["--paper", paper, "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["paper", "table", "row", "column", "value", "unit", "measure", "note"]
    assert len(rows) - 1 == len(docs[paper]["records"])
    assert {r[0] for r in rows[1:]} == {paper}


def test_cli_through_harness_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main as harness_main

    assert harness_main(["published", "--paper", "svdr", "--table", "1", "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) - 1 == 14 * 10
    dpr = {r[3]: r for r in rows[1:] if r[2] == "DPR"}
    assert dpr["NQ top20"][4:7] == ["80.2", "%", "Success@20"]
    assert harness_main(["published", "--paper", "svdr", "--table", "nope"]) == 2
    assert "unknown svdr table 'nope'" in capsys.readouterr().err


def test_cli_markdown_keeps_paper_order_and_marks_notes(
    docs: dict[str, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    assert pub.main(["--paper", "svdr", "--table", "2", "--format", "md"]) == 0
    out = capsys.readouterr().out
    t = pub.get_table(docs["svdr"], "2")
    header = next(line for line in out.splitlines() if line.startswith("| |"))
    assert header == "| | " + " | ".join(t["columns"]) + " |"
    body = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert [line.split(" | ")[0][2:] for line in body] == t["rows"]
    assert "| DPR | / | 20.3h [" in out and "†: computation on GPU" in out


def test_cli_json_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert pub.main(["--paper", "qcr", "--table", "1", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in payload["tables"]] == ["1"]
    assert len(payload["records"]) == 14 * 5


# ----------------------------------------------------------------------------- transcription check

NUM = re.compile(r"[-+]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Probe:
    """Cells read from one line of a paper: anchors locate the line; cells = (number index, row, column)."""

    paper: str
    table: str
    anchors: tuple[str, ...]
    cells: tuple[tuple[int, str, str], ...]


def row(
    paper: str,
    table: str,
    anchors: tuple[str, ...],
    label: str,
    columns: list[str],
    first: int = 0,
    step: int = 1,
) -> Probe:
    """A probe reading consecutive numbers of a line into consecutive columns of one row."""
    return Probe(paper, table, anchors, tuple((first + i * step, label, c) for i, c in enumerate(columns)))


def find_line(lines: list[str], anchors: tuple[str, ...]) -> str:
    start = 0
    for k, pat in enumerate(anchors):
        rx = re.compile(pat)
        hits = [i for i in range(start, len(lines)) if rx.search(lines[i])]
        if not hits:
            raise LookupError(f"anchor {pat!r} not found after line {start + 1}")
        if k == len(anchors) - 1 and len(anchors) == 1 and len(hits) > 1:
            raise LookupError(f"anchor {pat!r} is not unique (lines {[h + 1 for h in hits]})")
        start = hits[0] + (1 if k < len(anchors) - 1 else 0)
    return lines[start]


def check_probes(
    probes: list[Probe], docs: dict[str, dict], raw: dict[str, str], papers_dir: Path
) -> list[str]:
    """Compare every probed cell with the YAML; return the mismatches (empty when all agree)."""
    problems: list[str] = []
    texts: dict[str, list[str]] = {}
    index: dict[str, dict[tuple[str, str, str], dict]] = {}
    for probe in probes:
        lines = texts.setdefault(
            probe.paper, (papers_dir / SOURCES[probe.paper]).read_text(encoding="utf-8").splitlines()
        )
        try:
            line = find_line(lines, probe.anchors)
        except LookupError as exc:
            problems.append(f"{probe.paper} table {probe.table}: {exc}")
            continue
        numbers = NUM.findall(line)
        recs = index.setdefault(
            probe.paper, {(r["table"], r["row"], r["column"]): r for r in docs[probe.paper]["records"]}
        )
        for idx, label, column in probe.cells:
            where = f"{probe.paper} table {probe.table} [{label} | {column}]"
            try:
                token = numbers[idx]
            except IndexError:
                problems.append(f"{where}: line has no number #{idx}: {line!r}")
                continue
            rec = recs.get((probe.table, label, column))
            if rec is None:
                problems.append(f"{where}: no such record in the YAML")
                continue
            printed = token.replace(",", "").lstrip("+")
            if rec["value"] is None or float(rec["value"]) != float(printed):
                problems.append(f"{where}: YAML has {rec['value']!r}, paper prints {token!r}")
                continue
            # the literal written in the YAML keeps the paper's precision
            pat = re.compile(
                rf'table: "{re.escape(probe.table)}", row: {re.escape(_q(label))}, '
                rf"column: {re.escape(_q(column))}, value: (?:!!float )?(\S+?),"
            )
            m = pat.search(raw[probe.paper])
            if m is None:
                problems.append(f"{where}: record not found as one line in the YAML file")
            elif m.group(1) != printed:
                problems.append(
                    f"{where}: YAML literal {m.group(1)!r} loses the printed precision {printed!r}"
                )
    return problems


def _q(s: str) -> str:
    import json

    return json.dumps(s, ensure_ascii=False)


# --- SVDR
S = "svdr"
S1 = ("^Table 1: Top-k",)
_s1_cols = [f"{d} top{k}" for d in ("NQ", "TQA", "WQ") for k in (1, 5, 20)]
_s4_cols = ["MS MARCO RR@10"] + [
    f"BEIR {d} nDCG@10"
    for d in (
        "ArguAna",
        "Climate-FEVER",
        "DBPedia",
        "FEVER",
        "FiQA",
        "HotpotQA",
        "NFCorpus",
        "NQ",
        "SCIDOCS",
        "SciFact",
        "TREC-COVID",
        "Touche-2020",
        "Avg.",
    )
]
T1 = r"^\t\$E_\{\\theta\}\(q\)\$\ttop1"
SVDR_PROBES = [
    row(S, "1", (T1, r"^DPR\t"), "DPR", _s1_cols),
    row(S, "1", (T1, r"^\$VDR_\{\\alpha\}"), "VDR_α", _s1_cols),
    row(S, "1", (T1, r"^\$\\mathrm\{SVDR\}_\{lpha\}"), "SVDR_α", _s1_cols),
    row(S, "1", (T1, r"^VDR\t"), "VDR", _s1_cols),
    row(S, "1", (T1, r"^\$\\mathrm\{SVDR\}_\{\\mathrm\{full\}\}"), "SVDR_full", _s1_cols),
    row(S, "1", (T1, r"^BM25\t"), "BM25", _s1_cols, first=1),
    row(S, "1", (T1, r"^\$VDR_\{\\beta\}"), "VDR_β", _s1_cols),
    row(S, "1", (T1, r"^\$\\mathrm\{SVDR\}_\{eta\}"), "SVDR_β", _s1_cols),
    row(S, "1", (T1, r"^BM25 \+ DPR \(m = 20\)"), "BM25 + DPR (m=20)", _s1_cols, first=2),
    row(S, "1", (T1, r"^\$SVDR_\{\\beta\} \(m=20\)"), "SVDR_β (m=20)", _s1_cols, first=1),
    row(S, "1", (T1, r"^\$\\text\{SVDR\}_\{\\beta\} \(m = 100\)"), "SVDR_β (m=100)", _s1_cols, first=1),
    Probe(
        S,
        "2",
        (r"^Model\tIndexing", r"^DPR\t"),
        (
            (0, "DPR", "E_θ(D)"),
            (1, "DPR", "E_θ(q)"),
            (2, "DPR", "E_θ(q) CPU"),
            (3, "DPR", "f(q,D)"),
            (4, "DPR", "f(q,D) CPU"),
            (5, "DPR", "Search total"),
            (6, "DPR", "Total"),
        ),
    ),
    Probe(
        S,
        "2",
        (r"^Model\tIndexing", r"^\$\\mathrm\{SVDR\}_\{\\alpha\}"),
        (
            (0, "SVDR_α", "E_θ(D)"),
            (1, "SVDR_α", "T(q)"),
            (2, "SVDR_α", "f(q,D)"),
            (3, "SVDR_α", "f(q,D) CPU"),
            (4, "SVDR_α", "Search total"),
            (5, "SVDR_α", "Total"),
        ),
    ),
    Probe(
        S,
        "2",
        (r"^Model\tIndexing", r"^\$SVDR_\{\\beta\} \\ \(k=20\)"),
        (
            (1, "SVDR_β (k=20)", "T(D)"),
            (3, "SVDR_β (k=20)", "E_θ(q) CPU"),
            (4, "SVDR_β (k=20)", "f(q,D)"),
            (6, "SVDR_β (k=20)", "E_θ(p)"),
            (8, "SVDR_β (k=20)", "Total"),
        ),
    ),
    row(
        S,
        "fig3-ablation",
        (r"^\ttop1\ttop5\ttop20", r"^w/ retrieved neg \(MARCO\)"),
        "SVDR_full w/ retrieved neg (MARCO)",
        ["NQ top1", "NQ top5", "NQ top20"],
    ),
    row(
        S,
        "fig3-ablation",
        (r"^\tTokenization-based Ind", r"^w/o neg\t"),
        "SVDR_β w/o neg",
        ["NQ top1", "NQ top5", "NQ top20"],
    ),
    row(
        S,
        "fig3-ablation",
        (r"^\ttop1\ttop5\ttop20", r"vary lentgh"),
        "SVDR_β (vary lentgh)",
        ["NQ top1", "NQ top5", "NQ top20"],
    ),
    Probe(S, "3", (r"^Method\tLatency\tStorage\tGPU", r"^DPR\t"), ((1, "DPR", "Storage"), (2, "DPR", "GPU"))),
    Probe(
        S,
        "3",
        (r"^Method\tLatency\tStorage\tGPU", r"^BM25\t"),
        ((1, "BM25", "Latency"), (2, "BM25", "Storage")),
    ),
    row(S, "4", (r"^Model\tMSW", r"^DPR\t"), "DPR", _s4_cols),
    row(S, "4", (r"^Model\tMSW", r"^BM25\t"), "BM25", _s4_cols, first=1),
    row(S, "4", (r"^Model\tMSW", r"^\$SVDR_\{\\beta\}\$\t"), "SVDR_β", _s4_cols),
    row(
        S,
        "4",
        (r"^Model\tMSW", r"^\$\\text\{SVDR\}_\{\\beta\} \\ \(m = 100\)"),
        "SVDR_β (m=100)",
        _s4_cols,
        first=1,
    ),
    row(
        S,
        "5",
        (r"^\tLatency \(ms\)", r"^a=512"),
        "a=512",
        ["Latency (ms)", "Storage (GB)", "GPU (GB)"],
        first=1,
    ),
    Probe(S, "5", (r"^\tLatency \(ms\)", r"^bs=512"), ((1, "bs=512", "Latency (ms)"),)),
    Probe(
        S,
        "text",
        (r"^Figure 1: Left",),
        (
            (1, "Binary token index (SVDR_β), Wikipedia", "Storage"),
            (2, "Embedding-based index, Wikipedia", "Storage"),
            (3, "Binary token index (SVDR_β), Wikipedia", "Index preparation time"),
            (4, "Embedding-based index, Wikipedia", "Index preparation time"),
        ),
    ),
]

# --- BPR
B = "bpr"
_b_acc = [f"{d} top{k}" for k in (1, 20, 100) for d in ("NQ", "TQA")]
_b1 = _b_acc + ["NQ EM", "TQA EM", "Index size", "Query time"]
BT1 = r"^100% recall\. Model"
BPR_PROBES = [
    row(B, "1", (BT1, r"DPR distance DPR \+ HNSW"), "DPR", _b1, first=0, step=2),
    row(B, "1", (BT1, r"DPR distance DPR \+ HNSW"), "DPR + HNSW", _b1, first=1, step=2),
    row(B, "1", (BT1, r"DPR \+ Simple LSH DPR \+ PQ"), "DPR + Simple LSH", _b1, first=0, step=2),
    row(B, "1", (BT1, r"DPR \+ Simple LSH DPR \+ PQ"), "DPR + PQ", _b1, first=1, step=2),
    row(B, "1", (BT1, r"BPR \(linear scan"), "BPR (linear scan; l=1000)", _b1[:8], first=2),
    Probe(
        B,
        "1",
        (BT1, r"BPR \(linear scan"),
        (
            (10, "BPR (linear scan; l=1000)", "Index size"),
            (11, "BPR (hash table lookup; l=1000)", "Index size"),
            (12, "BPR (linear scan; l=1000)", "Query time"),
            (13, "BPR (hash table lookup; l=1000)", "Query time"),
        ),
    ),
    row(
        B,
        "2",
        (r"^Model\tTop 1\t\tTop 20", r"^BPR \$\(l = 1000\)\$"),
        "BPR (l=1000)",
        _b_acc + ["Query time"],
        first=1,
    ),
    Probe(
        B,
        "2",
        (r"^Model\tTop 1\t\tTop 20", r"^BPR w/o reranking"),
        (
            (0, "BPR w/o reranking", "NQ top1"),
            (1, "BPR w/o reranking", "TQA top20"),
            (2, "BPR w/o reranking", "Query time"),
        ),
    ),
    row(
        B,
        "2",
        (r"^Model\tTop 1\t\tTop 20", r"^BPR w/o candidate generation"),
        "BPR w/o candidate generation",
        _b_acc + ["Query time"],
    ),
    Probe(
        B,
        "3",
        (r"^Model \*\*Pretrained model\*\*",),
        (
            (1, "RAG (Lewis et al., 2020)", "#params (M)"),
            (2, "RAG (Lewis et al., 2020)", "NQ EM"),
            (3, "RAG (Lewis et al., 2020)", "TQA EM"),
            (11, "FiD (large) (Izacard and Grave, 2020)", "#params (M)"),
            (12, "FiD (large) (Izacard and Grave, 2020)", "NQ EM"),
            (16, "BPR (l=1000) [BERT-base]", "NQ EM"),
            (19, "BPR (l=1000) [ELECTRA-large]", "#params (M)"),
            (21, "BPR (l=1000) [ELECTRA-large]", "TQA EM"),
        ),
    ),
    row(B, "4", (r"^Dataset\tTrain\tValidation\tTest", r"^TQA\t"), "TQA", ["Train", "Validation", "Test"]),
    row(B, "4", (r"^Dataset\tTrain\tValidation\tTest", r"^NQ\t"), "NQ", ["Train", "Validation", "Test"]),
    Probe(B, "5", (r"^Name\tValue", r"^Peak learning rate"), ((0, "Peak learning rate", "Value"),)),
    Probe(B, "5", (r"^Name\tValue", r"^Warmup ratio"), ((0, "Warmup ratio", "Value"),)),
    Probe(B, "5", (r"^Name\tValue", r"^Adam \$\\epsilon\$"), ((0, "Adam ε", "Value"),)),
    row(
        B,
        "7",
        (r"^Configuration\tTop 1", r"^\$\\gamma = 0\.025\$"),
        "γ=0.025",
        ["NQ dev top1", "NQ dev top20", "NQ dev top100"],
        first=1,
    ),
    row(
        B,
        "7",
        (r"^Configuration\tTop 1", r"^\$\\gamma = 0\.2\$"),
        "γ=0.2",
        ["NQ dev top1", "NQ dev top20", "NQ dev top100"],
        first=1,
    ),
    row(B, "8", (r"^#candidates", r"^l = 200\t"), "l=200", _b_acc, first=1),
    Probe(
        B,
        "8",
        (r"^#candidates", r"^l = 500\t"),
        ((1, "l=500", "NQ top1"), (3, "l=500", "NQ top100"), (4, "l=500", "TQA top100")),
    ),
    row(
        B,
        "9",
        (r"^Table 8:", r"^Cross entropy loss"),
        "Cross entropy loss",
        ["NQ dev top1", "NQ dev top20", "NQ dev top100"],
    ),
    row(
        B,
        "9",
        (r"^Table 8:", r"^Ranking loss \$\\alpha = 4\.0\$"),
        "Ranking loss α=4.0",
        ["NQ dev top1", "NQ dev top20", "NQ dev top100"],
        first=1,
    ),
    Probe(
        B,
        "text",
        (r"^The passage index of the off-the-shelf DPR",),
        (
            (1, "DPR passage index (21M Wikipedia passages)", "Size"),
            (3, "21M English Wikipedia passages (text)", "Size"),
        ),
    ),
    Probe(
        B,
        "text",
        (r"^As the knowledge source, we use",),
        ((0, "21M English Wikipedia passages (text)", "Count"),),
    ),
]

# --- DensePhrases
D = "densephrases"
_d1 = ["Storage (GB)", "#Q/sec GPU", "#Q/sec CPU", "NQ (Acc)", "SQuAD (Acc)"]
_d3 = ["NQ EM", "WQ EM", "TREC EM", "TQA EM", "SQuAD EM"]
DT1 = r"^Category\tModel\tSparse\?"
DT3 = r"^Model\t\tNQ\tWQ\tTREC"
DT7 = r"^QS\tNQ\tWQ\tTREC"
DENSEPHRASES_PROBES = [
    row(D, "1", (DT1, r"ORQA \(Lee et al\., 2019\)\t"), "ORQA (Lee et al., 2019)", _d1, first=1),
    row(
        D,
        "1",
        (DT1, r"DenSPI \+ Sparc \(Lee et al\., 2020\)\t"),
        "DenSPI + Sparc (Lee et al., 2020)",
        _d1,
        first=1,
    ),
    row(D, "1", (DT1, r"DensePhrases \(Ours\)"), "DensePhrases (Ours)", _d1),
    Probe(
        D,
        "1",
        (DT1, r"DrQA \(Chen et al\., 2017\)"),
        ((1, "DrQA (Chen et al., 2017)", "Storage (GB)"), (4, "DrQA (Chen et al., 2017)", "SQuAD (Acc)")),
    ),
    row(
        D,
        "2",
        (r"^Model\tSQuAD\t\tNQ \(Long\)", r"^SpanBERT-base"),
        "SpanBERT-base",
        ["SQuAD EM", "SQuAD F1", "NQ (Long) EM", "NQ (Long) F1"],
    ),
    row(
        D,
        "2",
        (r"^Model\tSQuAD\t\tNQ \(Long\)", r"^DilBERT"),
        "DilBERT (Siblini et al., 2020)",
        ["SQuAD EM", "SQuAD F1"],
        first=1,
    ),
    row(
        D,
        "2",
        (r"^Model\tSQuAD\t\tNQ \(Long\)", r"^DenSPI <sup>"),
        "DenSPI",
        ["SQuAD EM", "SQuAD F1", "NQ (Long) EM", "NQ (Long) F1"],
    ),
    row(D, "3", (DT3, r"^BERT \+ BM25"), "BERT + BM25 (Lee et al., 2019)", _d3, first=2),
    row(D, "3", (DT3, r"^DPR-multi"), "DPR-multi (Karpukhin et al., 2020)", _d3, first=1),
    row(
        D,
        "3",
        (DT3, r"^DenSPI \+ Sparc \(Lee et al\., 2020\)\t\{SQuAD\}"),
        "DenSPI + Sparc (Lee et al., 2020) [C_phrase={SQuAD}]",
        _d3,
        first=1,
    ),
    row(D, "3", (DT3, r"^DensePhrases \(ours\)\t\{SQuAD\}"), "DensePhrases (ours) [C_phrase={SQuAD}]", _d3),
    row(
        D,
        "3",
        (DT3, r"^DensePhrases \(ours\)\t\{NQ, SQuAD\}"),
        "DensePhrases (ours) [C_phrase={NQ, SQuAD}]",
        _d3,
    ),
    row(
        D, "4", (r"^Model\tT-REx\t\tZsRE", r"^RAG\t"), "RAG", ["T-REx Acc", "T-REx F1", "ZsRE Acc", "ZsRE F1"]
    ),
    row(
        D,
        "4",
        (r"^Model\tT-REx\t\tZsRE", r"^DensePhrases <sup>10K"),
        "DensePhrases (10K)",
        ["T-REx Acc", "T-REx F1", "ZsRE Acc", "ZsRE F1"],
        first=1,
    ),
    Probe(
        D,
        "4",
        (r"^Model\tT-REx\t\tZsRE", r"^DPR \+ BERT"),
        ((0, "DPR + BERT", "ZsRE Acc"), (1, "DPR + BERT", "ZsRE F1")),
    ),
    Probe(D, "5", (r"^Model\t\$\\mathcal\{M\}\$", r"^\tBl\."), ((0, "DenSPI (Bl.)", "SQuAD dev EM"),)),
    Probe(
        D,
        "5",
        (r"^Model\t\$\\mathcal\{M\}\$", r"^\tSb\.\t✗\t✗\t✓\t✗"),
        ((0, "DensePhrases (Sb., QG)", "SQuAD dev EM"),),
    ),
    row(
        D,
        "6",
        (r"^Type\t\$B\$\t\$C\$", r"^\t84\t2\t"),
        "+ Pre-batch (B=84, C=2)",
        ["B", "C", "D={p} EM", "D=D_small EM"],
    ),
    row(D, "6", (r"^Type\t\$B\$\t\$C\$", r"^None\t"), "None (B=48)", ["B", "D={p} EM", "D=D_small EM"]),
    row(D, "7", (DT7, r"text\{NQ\}\\\}\$", r"^✗\t"), "C_phrase={NQ}, QS ✗", _d3),
    row(D, "7", (DT7, r"NQ\}, \\text\{SQuAD\}", r"^✓\t"), "C_phrase={NQ, SQuAD}, QS ✓", _d3),
    row(
        D,
        "A.1",
        (r"^Indexing\tResources\tStorage\tTime", r"^DenSPI \+ Sparc\t"),
        "DenSPI + Sparc",
        ["Indexing storage", "Indexing time"],
        first=2,
    ),
    row(
        D,
        "A.1",
        (r"^Inference\tRAM / GPU", r"^DensePhrases\t"),
        "DensePhrases",
        ["Inference RAM", "Inference GPU memory", "#Q/sec GPU", "#Q/sec CPU"],
    ),
    row(D, "C.3", (r"^Dataset\tTrain\tDev\tTest", r"^T-REx\t"), "T-REx", ["Train", "Dev", "Test"]),
    row(
        D,
        "C.3",
        (r"^Dataset\tTrain\tDev\tTest", r"^WebQuestions\t"),
        "WebQuestions",
        ["Train", "Dev", "Test"],
    ),
    Probe(
        D,
        "text",
        (r"^We use the Adam optimizer",),
        (
            (8, "Generated questions (QG) for SQuAD", "Count"),
            (9, "Generated questions (QG) for Natural Questions", "Count"),
        ),
    ),
]

# --- QCR
Q = "qcr"
_qc = [
    "MSMARCO dev nDCG-10",
    "MSMARCO dev RR-10",
    "MSMARCO dev Succ@10",
    "MSMARCO dev R@100",
    "MSMARCO dev Succ@100",
]
QT = r"^\| Model \| nDCG-10"
QCR_PROBES = [
    Probe(Q, "1", (QT, r"^\| DPR \(Dense\)"), ((0, "DPR (Dense)", "MSMARCO dev RR-10"),)),
    Probe(
        Q,
        "1",
        (QT, r"^\| Contriever Sup"),
        ((0, "Contriever Sup (Dense)", _qc[0]), (1, "Contriever Sup (Dense)", _qc[3])),
    ),
    row(Q, "1", (QT, r"^\| QCR-sup\. \|"), "QCR-sup.", _qc),
    row(Q, "1", (QT, r"^\| QCR-sup w/ rescoring"), "QCR-sup w/ rescoring", _qc),
    row(Q, "1", (QT, r"^\| QCR-sup w/ words \|"), "QCR-sup w/ words", _qc),
    row(Q, "1", (QT, r"^\| QCR-sup w/ words \+ RRF"), "QCR-sup w/ words + RRF", _qc),
    row(Q, "1", (QT, r"^\| k-means \(K =32k\) \|"), "k-means (K=32k)", _qc, first=1),
    row(Q, "1", (QT, r"^\| k-means \(\$K=32k\$\) w/ words"), "k-means (K=32k) w/ words", _qc, first=1),
    row(Q, "1", (QT, r"^\| BM25 \|"), "BM25", _qc, first=1),
    Probe(
        Q,
        "1",
        (QT, r"^\| Contriever Unsup"),
        ((0, "Contriever Unsup (Dense)", _qc[0]), (1, "Contriever Unsup (Dense)", _qc[3])),
    ),
    row(Q, "1", (QT, r"^\| QCR-uns\. \|"), "QCR-uns.", _qc),
    row(Q, "1", (QT, r"^\| QCR-uns\. w/ rescoring"), "QCR-uns. w/ rescoring", _qc),
    row(Q, "1", (QT, r"^\| QCR-uns\. w/ words \|"), "QCR-uns. w/ words", _qc),
    row(Q, "1", (QT, r"^\| QCR-uns\. w/ words \+ RRF"), "QCR-uns. w/ words + RRF", _qc),
]

# --- LightRetriever (hand-listed probes; tables 2, 5, 6, 8, 9, 10 are also checked in full below)
L = "lightretriever"
_l1 = [
    "Tokenization Time (s)",
    "Baseline GPU Encode Time (s)",
    "LightRetriever No-GPU Encode Time (s)",
    "LightRetriever No-GPU speedup",
    "LightRetriever GPU Encode Time (s)",
    "LightRetriever GPU speedup",
]
LT1 = r"^Batch Size Time \(s\)"
LIGHTRETRIEVER_PROBES = [
    row(L, "1", (LT1, r"^16 "), "Batch size 16", _l1, first=1),
    row(L, "1", (LT1, r"^4096 "), "Batch size 4096", _l1, first=1),
    Probe(
        L,
        "1",
        (LT1, r"^8192 "),
        (
            (1, "Batch size 8192", "LightRetriever No-GPU Encode Time (s)"),
            (2, "Batch size 8192", "LightRetriever GPU Encode Time (s)"),
        ),
    ),
    row(
        L,
        "3",
        (r"^Benchmark w/ KL wo/ KL", r"^Light Dense "),
        "Light Dense",
        [
            "w/ KL BeIR",
            "w/ KL CMTEB-R",
            "wo/ KL BeIR",
            "wo/ KL BeIR change",
            "wo/ KL CMTEB-R",
            "wo/ KL CMTEB-R change",
        ],
    ),
    row(
        L,
        "3",
        (r"^Benchmark w/ KL wo/ KL", r"^Baseline "),
        "Baseline",
        [
            "w/ KL BeIR",
            "w/ KL CMTEB-R",
            "wo/ KL BeIR",
            "wo/ KL BeIR change",
            "wo/ KL CMTEB-R",
            "wo/ KL CMTEB-R change",
        ],
    ),
    row(
        L,
        "4",
        (r"^Dense Ablation BeIR", r"^w/ Qry Full - Doc Light"),
        "Dense: Symmetry w/ Qry Full - Doc Light",
        ["BeIR", "BeIR change", "CMTEB-R", "CMTEB-R change"],
    ),
    row(
        L,
        "4",
        (r"^Dense Ablation BeIR", r"^wo/ Instruction"),
        "Dense: wo/ Instruction",
        ["BeIR", "BeIR change", "CMTEB-R", "CMTEB-R change"],
    ),
    row(
        L, "4", (r"^Sparse Ablation BeIR", r"^LightRetriever "), "Sparse: LightRetriever", ["BeIR", "CMTEB-R"]
    ),
    row(
        L,
        "4",
        (r"^Sparse Ablation BeIR", r"^w/ Value fixed to 1"),
        "Sparse: w/ Value fixed to 1",
        ["BeIR", "BeIR change", "CMTEB-R", "CMTEB-R change"],
        first=1,
    ),
    Probe(
        L,
        "text",
        (r"^Retrieval systems usually involve indexing",),
        (
            (3, "MS MARCO 8.8M passages, Llama-8b, Faiss dense index", "Index size"),
            (4, "MS MARCO 8.8M passages, Llama-8b, Lucene sparse index", "Index size"),
        ),
    ),
    Probe(
        L,
        "text",
        (r"^We conduct experiments of controlling dense",),
        (
            (-2, "MS MARCO, Top-k = 128 dense index (MRL)", "Index size"),
            (-1, "MS MARCO, Top-k = 128 sparse index", "Index size"),
            (17, "Top-k = 128 vs Top-k = 4096, BeIR", "Performance gap"),
            (18, "Top-k = 128 vs Top-k = 4096, CMTEB-R", "Performance gap"),
        ),
    ),
]

_MODELS = (
    "Llama3.2-1b",
    "Llama3.2-3b",
    "Llama3.1-8b",
    "Mistral0.3-7b",
    "Qwen2.5-1.5b",
    "Qwen2.5-3b",
    "Qwen2.5-7b",
)
_T2_FIRST = {
    "Static Embed": r"^Static Embed ",
    "BM25": r"^BM25 ",
    "BGE-m3_dense": r"^BGE-m3dense",
    "BGE-m3_sparse": r"^BGE-m3sparse",
    "LLM2Vec_llama": r"^LLM2Vecllama",
    "E5-Mistral": r"^E5-Mistral ",
}


def lightretriever_full_probes(doc: dict) -> list[Probe]:
    """Every cell of LightRetriever tables 2, 5, 6, 8, 9 and 10, located via their printed row labels."""
    probes: list[Probe] = []
    headers = {
        "8": r"^Task / Test, nDCG@10 ArguAna",
        "9": r"^Task / Test, nDCG@10 NFCorpus",
        "10": r"^Task / Dev, nDCG@10 Cmedqa",
        "2": r"^Benchmark BEIR \(15 datasets\)",
        "5": r"^Dataset Language Category Deduped",
        "6": r"^Dataset Original Size Deduped",
    }
    for tid, head in headers.items():
        t = pub.get_table(doc, tid)
        for label in t["rows"]:
            model = next((m for m in _MODELS if label.startswith(m + " ")), None)
            if model:
                anchors = (head, "^" + re.escape(model) + "$", "^" + re.escape(label[len(model) + 1 :]) + " ")
            elif tid == "2":
                anchors = (head, _T2_FIRST[label])
            else:
                anchors = (head, "^" + re.escape(label) + " ")
            if tid in ("8", "9", "10"):
                cols = t["columns"]
                probes.append(row(L, tid, anchors, label, cols, first=-len(cols)))
            elif tid == "5":
                probes.append(row(L, tid, anchors, label, ["Deduped Size", "Epoch", "Ratio"], first=-3))
            elif tid == "6":
                probes.append(row(L, tid, anchors, label, t["columns"], first=-3))
            else:  # table 2: eight averages; Light Hybrid rows also print the gap (twice) after nDCG@10
                b = ["BEIR R@20", "BEIR R@50", "BEIR R@100"]
                c = ["CMTEB-R R@20", "CMTEB-R R@50", "CMTEB-R R@100"]
                if label.endswith("Light Hybrid"):
                    cells = [
                        (-16, "BEIR nDCG@10"),
                        (-15, "BEIR nDCG@10 gap to Baseline"),
                        (-11, b[0]),
                        (-10, b[1]),
                        (-9, b[2]),
                        (-8, "CMTEB-R nDCG@10"),
                        (-7, "CMTEB-R nDCG@10 gap to Baseline"),
                        (-3, c[0]),
                        (-2, c[1]),
                        (-1, c[2]),
                    ]
                else:
                    cells = list(zip(range(-8, 0), ["BEIR nDCG@10", *b, "CMTEB-R nDCG@10", *c], strict=True))
                probes.append(Probe(L, tid, anchors, tuple((i, label, col) for i, col in cells)))
    return probes


ALL_PROBES = SVDR_PROBES + BPR_PROBES + DENSEPHRASES_PROBES + QCR_PROBES + LIGHTRETRIEVER_PROBES


@pytest.fixture(scope="module")
def papers_dir() -> Path:
    if not PAPERS_DIR.is_dir():
        pytest.skip(f"paper texts not found at {PAPERS_DIR} (the transcription check needs ../shared/papers)")
    return PAPERS_DIR


@pytest.fixture(scope="module")
def raw() -> dict[str, str]:
    return {p: (PUBLISHED / f"{p}.yaml").read_text(encoding="utf-8") for p in pub.PAPERS}


@pytest.mark.parametrize("paper", pub.PAPERS)
def test_transcription_matches_paper_text(paper: str, docs: dict, raw: dict, papers_dir: Path) -> None:
    probes = [p for p in ALL_PROBES if p.paper == paper]
    if paper == "lightretriever":
        probes += lightretriever_full_probes(docs[paper])
    n_cells = sum(len(p.cells) for p in probes)
    tables = {p.table for p in probes}
    assert n_cells >= 10 and len(tables) >= min(3, len(REQUIRED_TABLES[paper])), (paper, n_cells, tables)
    problems = check_probes(probes, docs, raw, papers_dir)
    assert not problems, "\n".join(problems)


def test_transcription_check_catches_a_wrong_value(docs: dict, raw: dict, papers_dir: Path) -> None:
    bad = copy.deepcopy(docs)
    for r in bad["svdr"]["records"]:
        if (r["table"], r["row"], r["column"]) == ("1", "SVDR_β (m=20)", "TQA top5"):
            r["value"] = 72.8  # paper prints 72.9
    problems = check_probes(SVDR_PROBES, bad, raw, papers_dir)
    assert len(problems) == 1 and "SVDR_β (m=20) | TQA top5" in problems[0] and "72.9" in problems[0]


def test_transcription_check_catches_lost_precision(docs: dict, raw: dict, papers_dir: Path) -> None:
    bad_raw = dict(raw)
    bad_raw["svdr"] = raw["svdr"].replace(
        'row: "DPR", column: "NQ top1", value: 46.0,', 'row: "DPR", column: "NQ top1", value: 46,'
    )
    assert bad_raw["svdr"] != raw["svdr"]
    problems = check_probes(SVDR_PROBES, docs, bad_raw, papers_dir)
    assert len(problems) == 1 and "precision" in problems[0]


def test_transcription_check_catches_a_wrong_lightretriever_cell(
    docs: dict, raw: dict, papers_dir: Path
) -> None:
    bad = copy.deepcopy(docs)
    for r in bad["lightretriever"]["records"]:
        if (r["table"], r["row"], r["column"]) == ("10", "Qwen2.5-3b Light Sparse", "CMTEB-R Video nDCG@10"):
            r["value"] = 49.7  # paper prints 47.9
    problems = check_probes(lightretriever_full_probes(bad["lightretriever"]), bad, raw, papers_dir)
    assert len(problems) == 1 and "47.9" in problems[0]
