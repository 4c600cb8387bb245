"""TextEncoder: offline loading, sentence-transformers parity, semantic sanity (real MiniLM) and tiny models."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.content_embeddings.config import default_text_model
from hir_pipeline.content_embeddings.text import TextEncoder, length_order
from tests.tiny_models import build_tiny_text_model

TEXTS = [
    "Men's red running shoes with breathable mesh",
    "Lightweight jogging sneakers for athletes",
    "Stainless steel espresso machine with milk frother",
    "laptop",
    "Organic green tea, 100 bags. " * 60,  # far beyond 256 tokens: exercises truncation
    "Ünïcödé café crème brûlée — 20% off!",
]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> TextEncoder:
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        yield TextEncoder(default_text_model(), max_length=256, batch_size=4)
    finally:
        mp.undo()


def test_loads_offline_and_embeds_unit_vectors(minilm):
    emb = minilm.encode(TEXTS)
    assert emb.shape == (len(TEXTS), 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)


def test_matches_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(default_text_model(), device="cpu").encode(TEXTS, convert_to_numpy=True)
    ours = minilm.encode(TEXTS)
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    assert (np.sum(ours * reference, axis=1) > 1 - 1e-6).all()


def test_similar_texts_are_closer_than_dissimilar(minilm):
    shoes, sneakers, espresso = minilm.encode(TEXTS[:3])
    assert shoes @ sneakers > shoes @ espresso + 0.2
    assert shoes @ sneakers > sneakers @ espresso + 0.2


def test_input_order_is_kept_whatever_the_batching(minilm):
    full = minilm.encode(TEXTS)
    one_by_one = np.stack([minilm.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(full, one_by_one, atol=1e-5)


def test_length_order_is_longest_first_and_stable():
    assert length_order(["aa", "b", "cccc", "dd"]).tolist() == [2, 0, 3, 1]


def test_tiny_random_model(tmp_path):
    folder = build_tiny_text_model(tmp_path / "tiny", seed=1, hidden_size=32)
    enc = TextEncoder(str(folder), max_length=16, batch_size=2)
    emb = enc.encode(["red shoe", "blue bag for men with a very long unknown tail of words", "x"])
    assert emb.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert enc.encode([]).shape == (0, 32)
    other = TextEncoder(str(build_tiny_text_model(tmp_path / "tiny2", seed=2, hidden_size=32)))
    assert not np.allclose(other.encode(["red shoe"]), enc.encode(["red shoe"]), atol=1e-3)


def test_unknown_model_is_an_error_not_a_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError):
        TextEncoder("no-such-org/no-such-model-hir")


def test_tiny_tokenizer_knows_its_vocabulary(tmp_path):
    enc = TextEncoder(str(build_tiny_text_model(tmp_path / "tiny")))
    assert enc.tokenizer.tokenize("Red leather shoes") == ["red", "leather", "shoes"]
    a, b = enc.encode(["red running shoes", "red leather shoes"])
    assert not np.allclose(a, b, atol=1e-4)  # one known word changed => a different vector
