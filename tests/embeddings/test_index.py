"""The LanceDB index on a temporary folder: upserts, filtered search, threshold, purge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import embeddings.index as index_module
from embeddings.index import (
    IndexRow,
    VectorIndex,
    fuse_scores,
    quote,
    table_name,
    table_names,
)
from tests.fakes import HashEncoder

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database

ENC = HashEncoder(dim=32)


def row(
    i: int,
    text: str,
    *,
    agent: str = "a",
    phone: str = "+15550000001",
    kind: str = "turn",
    status: str = "archived",
) -> IndexRow:
    return IndexRow(
        id=f"{kind}:{i}",
        kind=kind,
        ref_id=str(i),
        agent=agent,
        phone=phone,
        status=status,
        type="user",
        created_at="2026-01-01T00:00:00.000Z",
        text=text,
    )


def put(index: VectorIndex, rows: list[IndexRow]) -> None:
    index.upsert(rows, ENC.encode([r.text for r in rows]))


@pytest.fixture
def index(tmp_path: Path) -> VectorIndex:
    return VectorIndex(tmp_path / "lance", "fake-hash", 32)


TEXTS = [
    "my dog Biscuit loves the beach",
    "I work night shifts at the hospital",
    "order 48213 was a blue jacket I want refunded",
    "we are going to Lisbon in June",
    "my sister Ana is getting married",
]


def test_upsert_is_idempotent_and_replaces(index: VectorIndex) -> None:
    rows = [row(i, t) for i, t in enumerate(TEXTS)]
    put(index, rows)
    put(index, rows)
    assert index.count() == len(TEXTS)
    put(index, [row(0, "my cat Pixel")])
    assert index.count() == len(TEXTS)
    assert index.get(["turn:0"])["turn:0"][0].text == "my cat Pixel"


def test_threshold_zero_gives_k_and_high_threshold_none_for_a_paraphrase(
    index: VectorIndex,
) -> None:
    put(index, [row(i, t) for i, t in enumerate(TEXTS)])
    query = ENC.encode(["does your dog like going to the beach"])[0]
    everything = index.search(query, where="agent = 'a'", k=3, min_score=-1.0)
    assert len(everything) == 3
    assert everything[0].row.text == TEXTS[0]
    assert [h.score for h in everything] == sorted((h.score for h in everything), reverse=True)
    assert index.search(query, where="agent = 'a'", k=3, min_score=0.99) == []
    exact = index.search(ENC.encode([TEXTS[1]])[0], where="agent = 'a'", k=3, min_score=0.99)
    assert [h.row.text for h in exact] == [TEXTS[1]]
    assert exact[0].score == pytest.approx(1.0, abs=1e-4)


def test_filters_keep_agents_and_people_apart(index: VectorIndex) -> None:
    put(
        index,
        [
            row(1, "secret plan", agent="a"),
            row(2, "secret plan", agent="b"),
            row(3, "secret plan", agent="a", phone="+15550000002"),
        ],
    )
    query = ENC.encode(["secret plan"])[0]
    where = f"agent = {quote('a')} AND phone = {quote('+15550000001')}"
    assert [h.row.id for h in index.search(query, where=where, k=10)] == ["turn:1"]
    assert [h.row.id for h in index.keyword("secret", where=where, k=10)] == ["turn:1"]


def test_keyword_finds_an_exact_order_number(index: VectorIndex) -> None:
    put(index, [row(i, t) for i, t in enumerate(TEXTS)])
    hits = index.keyword("what about order 48213?", where="kind = 'turn'", k=2)
    assert hits[0].row.ref_id == "2"
    hybrid = index.hybrid(ENC.encode(["48213"])[0], "48213", where="kind = 'turn'", k=2)
    assert hybrid[0].row.ref_id == "2"


def test_quotes_in_filters_are_escaped(index: VectorIndex) -> None:
    put(index, [row(1, "x", agent="o'brien")])
    assert index.count(f"agent = {quote(chr(39).join(['o', 'brien']))}") == 1


def test_fused_scores_let_a_strong_keyword_match_lead_and_cosine_order_the_rest() -> None:
    a, b, c, d = (row(i, t) for i, t in enumerate(TEXTS[:4]))
    from embeddings.index import Hit

    semantic = [Hit(a, 0.90), Hit(b, 0.85), Hit(c, 0.80)]
    keyword = [Hit(c, 12.0), Hit(d, 0.5)]  # c: many shared words; d: one weak one
    cosines = {a.id: 0.90, b.id: 0.85, c.id: 0.80, d.id: 0.60}
    fused = fuse_scores(semantic, keyword, cosines, k=4, semantic_weight=0.7)
    assert [h.row.id for h in fused] == [c.id, a.id, b.id, d.id]
    # 0.7 * 0.80 + 0.3 * 12 / 17; a weak match adds little: 0.7 * 0.60 + 0.3 * 0.5 / 5.5
    assert fused[0].score == pytest.approx(0.56 + 0.3 * 12 / 17)
    assert fused[-1].score == pytest.approx(0.42 + 0.3 * 0.5 / 5.5)
    cosine_only = fuse_scores(semantic, keyword, cosines, k=1, semantic_weight=1.0)
    assert [h.row.id for h in cosine_only] == [a.id]


def test_hybrid_scores_a_keyword_match_outside_the_semantic_list_by_its_own_vector(
    index: VectorIndex,
) -> None:
    put(index, [row(i, t) for i, t in enumerate(TEXTS)])
    query = ENC.encode(["48213"])[0]
    hits = index.hybrid(query, "48213", where="kind = 'turn'", k=1, min_score=0.999)
    # The cosine floor leaves the semantic list empty; the keyword match keeps its cosine.
    stored = index.get(["turn:2"])["turn:2"][1]
    bm25 = index.keyword("48213", where="kind = 'turn'", k=1)[0].score
    assert [h.row.ref_id for h in hits] == ["2"]
    assert hits[0].score == pytest.approx(0.7 * float(stored @ query) + 0.3 * bm25 / (bm25 + 5))


def test_delete_then_purge_leaves_no_old_version_holding_the_row(index: VectorIndex) -> None:
    from lance.file import LanceFileReader

    put(index, [row(i, f"{t} canaryzz{i}") for i, t in enumerate(TEXTS)])
    put(index, [row(9, "another batch")])
    assert index.delete_person("a", "+15550000001") == 6
    index.purge()
    assert index.count() == 0
    files = [p for p in index.data_files() if p.endswith(".lance")]
    for path in files:
        table = LanceFileReader(path).read_all().to_table()
        assert "canaryzz" not in str(table.to_pylist()), path
    for path in index.data_files():
        assert b"canaryzz" not in Path(path).read_bytes(), path
    versions = list((index.path / f"{index.name}.lance" / "_versions").glob("*.manifest"))
    assert len(versions) == 1


def test_one_table_per_model_and_dimension(tmp_path: Path) -> None:
    VectorIndex(tmp_path, "model-a", 32)
    VectorIndex(tmp_path, "model-a", 64)
    VectorIndex(tmp_path, "sentence-transformers/all-MiniLM-L6-v2", 384)
    assert table_names(tmp_path) == sorted(
        [
            table_name("model-a", 32),
            table_name("model-a", 64),
            table_name("sentence-transformers/all-MiniLM-L6-v2", 384),
        ]
    )
    assert len(set(table_names(tmp_path))) == 3


def test_vectors_are_stored_as_given(index: VectorIndex) -> None:
    vectors = ENC.encode(TEXTS[:2])
    index.upsert([row(0, TEXTS[0]), row(1, TEXTS[1])], vectors)
    got = index.get(["turn:0", "turn:1"])
    assert np.allclose(got["turn:1"][1], vectors[1])
    # The vectors alone (the excerpts' neighbour cosines): the same floats, by id; an id the
    # index does not hold is left out.
    alone = index.vectors(["turn:1", "turn:0", "turn:9"])
    assert set(alone) == {"turn:0", "turn:1"}
    assert np.array_equal(alone["turn:0"], got["turn:0"][1])
    assert np.array_equal(alone["turn:1"], vectors[1])
    assert alone["turn:1"].dtype == np.float32 and alone["turn:1"].shape == (ENC.dim,)
    assert index.vectors([]) == {} and index.vectors(["turn:9"]) == {}


def _open_files_under(folder: Path) -> int:
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        count += str(target).startswith(str(folder))
    return count


def test_steady_writes_keep_open_files_bounded(
    index: VectorIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LanceDB keeps every superseded full-text index open for the life of a connection; the
    # index folds new rows in every few writes here (every 2,000 rows in service), so without
    # a fresh connection after each fold this leaked 2 descriptors per write (issue 15, item 10).
    monkeypatch.setattr(index_module, "INDEX_UPDATE_ROWS", 3)
    put(index, [row(i, t) for i, t in enumerate(TEXTS)])
    index.optimize()
    index.keyword("Lisbon", where="agent = 'a'", k=3)
    before = _open_files_under(tmp_path)
    for i in range(60):
        put(index, [row(100 + i, f"note {i} about the weekly coffee order")])
        index.optimize()
        assert index.keyword(f"{i}", where=f"id = 'turn:{100 + i}'", k=3)
    assert index.reopened >= 20
    assert _open_files_under(tmp_path) <= before + 4


def test_keyword_finds_rows_the_index_has_not_folded_in(
    index: VectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "INDEX_UPDATE_ROWS", 10_000)
    put(index, [row(i, t) for i, t in enumerate(TEXTS)])
    index.optimize()
    put(index, [row(50, "the parcel for order 99120 never came")])
    index.optimize()  # compacts, does not fold the new row into the full-text index
    hits = index.keyword("99120", where="agent = 'a'", k=3)
    assert [h.row.id for h in hits] == ["turn:50"]
    index.update_indexes()
    assert [h.row.id for h in index.keyword("99120", where="agent = 'a'", k=3)] == ["turn:50"]


SPANISH = [
    "Mañana es mi cumpleaños y quiero una torta de chocolate",
    "La casa de la playa está lejos de la ciudad",
    "My son plays football on Saturdays",
    "Los perros de mi vecina ladran toda la noche",
]


def test_keyword_search_folds_accents_both_ways(index: VectorIndex) -> None:
    put(index, [row(i, t) for i, t in enumerate(SPANISH)])
    assert [h.row.id for h in index.keyword("cumpleanos", where="agent = 'a'", k=3)] == ["turn:0"]
    put(index, [row(9, "el cumpleanos de Javier es el sabado")])
    found = {h.row.id for h in index.keyword("cumpleaños sábado", where="agent = 'a'", k=3)}
    assert found == {"turn:0", "turn:9"}


def test_stop_words_of_either_language_alone_match_nothing(index: VectorIndex) -> None:
    put(index, [row(i, t) for i, t in enumerate(SPANISH)])
    for query in ["de la que", "el", "esta", "está", "the of and", "de"]:
        assert index.keyword(query, where="agent = 'a'", k=3) == [], query
    # Spanish stop words that are English words people ask about stay searchable.
    assert [h.row.id for h in index.keyword("son", where="agent = 'a'", k=3)] == ["turn:2"]


def test_a_table_indexed_another_way_is_reindexed_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "KEYWORD_ANALYSIS", "english")
    first = VectorIndex(tmp_path / "lance", "fake-hash", 32)
    put(first, [row(i, t) for i, t in enumerate(SPANISH)])
    assert first.keyword("de", where="agent = 'a'", k=3)  # English only: "de" is a word
    monkeypatch.setattr(index_module, "KEYWORD_ANALYSIS", "bilingual")
    again = VectorIndex(tmp_path / "lance", "fake-hash", 32)
    names = {i.name for i in again._table.list_indices()}
    assert {"text_fts_bilingual", "content_fts_bilingual"} <= names
    assert not any("fts_english" in n for n in names)
    assert again.keyword("de", where="agent = 'a'", k=3) == []
