"""Strict streaming readers: malformed input raises DataError with file:line, or is counted when known."""
from __future__ import annotations

import gzip
import json

import pytest

from harness.datasets import readers
from harness.datasets.readers import Issues
from harness.errors import DataError


def _w(path, text: str | bytes):
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_bad_json_line_names_file_and_line(tmp_path):
    p = _w(tmp_path / "q.jsonl", '{"question": "a", "answer": ["x"]}\n{"question": "b", "ans\n')
    with pytest.raises(DataError, match=r"q\.jsonl:2: invalid JSON"):
        list(readers.read_qa_jsonl(p, Issues()))


def test_non_utf8_line_names_file_and_line(tmp_path):
    p = _w(tmp_path / "t.tsv", b"1\tfine\n" + b"2\tbad \xff byte\n")
    with pytest.raises(DataError, match=r"t\.tsv:2: not UTF-8"):
        list(readers.read_tsv_topics(p, Issues()))


def test_wrong_column_count(tmp_path):
    p = _w(tmp_path / "qrels.txt", "q1 0 d1 1\nq1 0 d2\n")
    with pytest.raises(DataError, match=r"qrels\.txt:2: expected 4 columns, got 3"):
        readers.read_trec_qrels(p, Issues())
    p = _w(tmp_path / "topics.tsv", "1\ta\n2\tb\tc\n")
    with pytest.raises(DataError, match=r"topics\.tsv:2: expected 2 columns, got 3"):
        list(readers.read_tsv_topics(p, Issues()))


def test_duplicate_ids_raise_unless_known(tmp_path):
    p = _w(tmp_path / "topics.tsv", "1\ta\n2\tb\n1\tc\n")
    with pytest.raises(DataError, match=r"topics\.tsv:3: duplicate query id '1' \(first at .*topics\.tsv:1\)"):
        list(readers.read_tsv_topics(p, Issues()))
    issues = Issues({readers.DUPLICATE_IDS})
    got = list(readers.read_tsv_topics(p, issues))
    assert [q.id for q in got] == ["1", "2"]
    assert issues.as_dict()["duplicate-ids"]["count"] == 1


def test_qrels_naming_unknown_documents(tmp_path):
    p = _w(tmp_path / "qrels.txt", "q1 0 d1 1\nq1 0 d9 1\n")
    qrels = readers.read_trec_qrels(p, Issues())
    with pytest.raises(DataError, match=r"qrels\.txt: 1 judged documents are not in the corpus \(e.g. \['d9'\]\)"):
        readers.check_qrels_docs(qrels, {"d1"}, p, Issues())
    issues = Issues({readers.UNKNOWN_DOCS})
    assert readers.check_qrels_docs(qrels, {"d1"}, p, issues) == {"q1": {"d1": 1}}
    assert issues.counts[readers.UNKNOWN_DOCS] == 1


def test_unjudged_topics_and_qrels_for_unknown_topics(tmp_path):
    from harness.datasets import Query

    qs = [Query("1", "a"), Query("2", "b")]
    with pytest.raises(DataError, match="1 topics have no judgment"):
        readers.keep_judged(qs, {"1": {"d": 1}}, tmp_path / "qrels", Issues())
    issues = Issues({readers.UNJUDGED})
    assert [q.id for q in readers.keep_judged(qs, {"1": {"d": 1}}, tmp_path / "qrels", issues)] == ["1"]
    with pytest.raises(DataError, match="not in the topics"):
        readers.keep_judged(qs, {"1": {"d": 1}, "7": {"d": 1}}, tmp_path / "qrels", Issues({readers.UNJUDGED}))


def test_dpr_qa_list_follows_dpr_csv_quoting(tmp_path):
    p = _w(tmp_path / "qa.csv", 'who wrote it\t[\'A\', "B\'s"]\n'
                                '"""Quoted"" question?"\t"[\'""x"" y\']"\n'
                                "broken\tnot a list\n")
    it = readers.read_dpr_qa_tsv(p, Issues())
    q0, q1 = next(it), next(it)
    assert (q0.id, q0.text, q0.answers) == ("0", "who wrote it", ["A", "B's"])
    assert q1.text == '"Quoted" question?' and q1.answers == ['"x" y']
    with pytest.raises(DataError, match=r"qa\.csv:3: answers .* not a Python list literal"):
        next(it)


def test_json_array_streams_and_locates_errors(tmp_path):
    recs = [{"qId": f"wq{i}", "qText": f"q {i}?", "answers": ["a"]} for i in range(500)]
    p = _w(tmp_path / "wq.json", json.dumps(recs, indent=1))
    got = list(readers.iter_json_array(p, chunk=64))
    assert [v for _, v in got] == recs
    lines = p.read_text().splitlines()
    assert all(lines[line - 1].strip() == "{" for line, _ in got)  # each element's first line
    _w(p, json.dumps(recs)[:-40])
    with pytest.raises(DataError, match="wq.json:1: invalid JSON|not closed"):
        list(readers.iter_json_array(p, chunk=64))
    _w(p, '[{"a": 1} {"a": 2}]')
    with pytest.raises(DataError, match="expected ',' or ']'"):
        list(readers.iter_json_array(p))


def test_smart_format_and_cranfield_quirks(tmp_path):
    q = _w(tmp_path / "cran.qry", ".I 001\n.W\nfirst query\ntext .\n.I 004\n.W\nsecond .\n")
    issues = Issues({readers.QUERY_NUMBERING})
    got = list(readers.read_smart_queries(q, issues, renumber=True))
    assert [(x.id, x.text) for x in got] == [("1", "first query text ."), ("2", "second .")]
    assert issues.counts[readers.QUERY_NUMBERING] == 1
    with pytest.raises(DataError, match=r"cran\.qry:5: query \.I 004 is number 2"):
        list(readers.read_smart_queries(q, Issues(), renumber=True))
    rel = _w(tmp_path / "cranqrel", "1 10 1\n1 11 4\n\n1 12 -1\n2 10 2")
    with pytest.raises(DataError, match=r"cranqrel:4: relevance code '-1'"):
        readers.read_cranfield_qrels(rel, Issues())
    issues = Issues({readers.RELEVANCE_CODE})
    assert readers.read_cranfield_qrels(rel, issues) == {"1": {"10": 4, "11": 1}, "2": {"10": 3}}
    assert issues.counts == {readers.BLANK_LINE: 1, readers.RELEVANCE_CODE: 1}
    docs = _w(tmp_path / "c.all", ".I 1\n.T\ntitle one\n.A\nx\n.W\nbody\none\n.I 2\n.T\nt2\n.W\n")
    assert [tuple(d) for d in readers.read_smart_docs(docs, Issues())] == [("1", "title one", "body one"), ("2", "t2", "t2")]
    with pytest.raises(DataError, match=r"bad:1: text before the first"):
        list(readers.read_smart_docs(_w(tmp_path / "bad", "oops\n.I 1\n"), Issues()))


def test_trec_docs_and_topics(tmp_path):
    d = _w(tmp_path / "docs.trec", "<DOC>\n<DOCNO>1</DOCNO>\nhello\nworld\n</DOC>\n<DOC>\n<DOCNO>2</DOCNO>\nx\n</DOC>\n")
    assert [tuple(x) for x in readers.read_trec_docs(d, Issues())] == [("1", "", "hello world"), ("2", "", "x")]
    _w(d, "<DOC>\n<DOCNO>1</DOCNO>\nhello\n")
    with pytest.raises(DataError, match=r"docs\.trec:1: <DOC> not closed"):
        list(readers.read_trec_docs(d, Issues()))
    t = _w(tmp_path / "q.trec", "<top>\n<num>1</num><title>\nA B\n</title>\n</top>\n<top>\n<num>2</num><title>C</title>\n</top>\n")
    assert [(q.id, q.text) for q in readers.read_trec_topics_xml(t, Issues())] == [("1", "A B"), ("2", "C")]


def test_gzip_and_kilt_and_brmson(tmp_path):
    p = tmp_path / "t.tsv.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write("7\tgz topic\n")
    assert [(q.id, q.text) for q in readers.read_tsv_topics(p, Issues())] == [("7", "gz topic")]
    k = _w(tmp_path / "k.jsonl", json.dumps({"id": "x1", "input": "Foo [SEP] born in", "output": [
        {"answer": "Bar", "provenance": [{"wikipedia_id": "42"}]}, {"answer": "Bar"}, {"provenance": [{"wikipedia_id": "43"}]}]}) + "\n")
    [q] = readers.read_kilt_jsonl(k, Issues())
    assert (q.id, q.answers, q.gold) == ("x1", ["Bar"], ["42", "43"])
    b = _w(tmp_path / "c.tsv", "1\tfactoid\tWho?\tA|B\n2\tfactoid\tWhat?\n")
    with pytest.raises(DataError, match=r"c\.tsv:2: expected 4 columns, got 3"):
        list(readers.read_brmson_tsv(b, Issues()))


def test_unknown_format_is_an_error(tmp_path):
    with pytest.raises(DataError, match="no query reader for format 'xml-ish'"):
        readers.read_queries(tmp_path / "x", "xml-ish", Issues())
