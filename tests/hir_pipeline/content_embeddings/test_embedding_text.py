"""TextEncoder: offline loading, sentence-transformers parity, semantic sanity (real MiniLM) and tiny models
(plain transformers folders and sentence-transformers folders with their own modules)."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.content_embeddings.config import default_text_model
from hir_pipeline.content_embeddings.text import TextEncoder
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


def test_plain_transformers_folder_is_mean_pooled_and_normalised(tmp_path):
    """Without sentence-transformers config the masked mean of the last hidden state, L2-normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = build_tiny_text_model(tmp_path / "tiny", seed=3)
    texts = ["red running shoes for men", "tea", "blue cotton shirt with a leather bag"]
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(TextEncoder(str(folder), max_length=16).encode(texts), expected, atol=1e-5)


def test_sentence_transformers_folder_runs_its_own_modules(tmp_path):
    """A saved sentence model (transformer, CLS pooling, a dense projection to 8-d, no Normalize) is run as saved;
    the vectors are still unit-norm."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer

    plain = build_tiny_text_model(tmp_path / "tiny", seed=4, hidden_size=32)
    transformer = Transformer(str(plain), max_seq_length=16)
    sentence_model = SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="cls"), Dense(32, 8)],
                                         device="cpu")
    sentence_model.save(str(tmp_path / "sentence"))
    enc = TextEncoder(str(tmp_path / "sentence"), max_length=16, batch_size=2)
    texts = ["red shoe", "green tea for kids", "a premium leather bag"]
    emb = enc.encode(texts)
    assert enc.dim == 8 and emb.shape == (3, 8)
    reference = SentenceTransformer(str(tmp_path / "sentence"), device="cpu").encode(texts)
    np.testing.assert_allclose(emb, reference / np.linalg.norm(reference, axis=1, keepdims=True), atol=1e-5)
