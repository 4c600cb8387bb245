"""The model-output checks: each one fails on the broken outputs it exists for and passes on healthy ones."""

import numpy as np
import pytest

from hir_pipeline.training.output_checks import (
    CHECK_NAMES,
    OutputCheckConfig,
    check_outputs,
    effective_rank,
    mean_pairwise_cosine,
)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def healthy() -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    emb = _unit(rng.normal(size=(200, 16)))
    probs = [np.eye(k, dtype=np.float32)[rng.integers(0, k, 200)] * 0.9 + 0.1 / k for k in (4, 16)]
    return emb, probs


def _verdicts(emb, probs, **config) -> dict[str, bool]:
    return {c.name: c.passed for c in check_outputs(emb, probs, OutputCheckConfig(**config))}


def test_healthy_outputs_pass_every_check(healthy):
    assert _verdicts(*healthy) == dict.fromkeys(CHECK_NAMES, True)


def test_a_nan_or_unnormalised_embedding_fails(healthy):
    emb, probs = healthy
    nan = emb.copy()
    nan[3, 0] = np.nan
    [norm] = [c for c in check_outputs(nan, probs) if c.name == CHECK_NAMES[0]]
    assert not norm.passed and norm.details["non_finite_rows"] == 1
    assert not _verdicts(nan, probs)[CHECK_NAMES[2]]  # nor can a space with NaN be judged healthy
    long = emb.copy()
    long[5] *= 1.01
    [norm] = [c for c in check_outputs(long, probs) if c.name == CHECK_NAMES[0]]
    assert not norm.passed and norm.details["rows_off_unit_norm"] == 1


def test_a_level_with_one_cluster_fails(healthy):
    emb, probs = healthy
    one = np.zeros_like(probs[1])
    one[:, 7] = 1.0
    [used] = [c for c in check_outputs(emb, [probs[0], one]) if c.name == CHECK_NAMES[1]]
    assert not used.passed and used.details["clusters_used"] == [4, 1]
    assert _verdicts(emb, [probs[0], one], min_clusters_used=1)[CHECK_NAMES[1]]


def test_a_collapsed_space_fails_on_cosine_or_rank(healthy):
    emb, probs = healthy
    rng = np.random.default_rng(1)
    point = _unit(np.ones((1, 16)) + rng.normal(size=(200, 16)) * 0.01)  # every node near one point
    assert not _verdicts(point, probs)[CHECK_NAMES[2]]
    line = _unit(np.outer(rng.choice([-1.0, 1.0], 200), np.ones(16)))  # two antipodal points: cosine ~0, rank 1
    assert mean_pairwise_cosine(line) < 0.1 and effective_rank(line) == pytest.approx(1.0, abs=1e-6)
    assert not _verdicts(line, probs)[CHECK_NAMES[2]]


def test_published_rows_with_the_structure_part_are_judged_by_the_encoder_embeddings(healthy):
    """Published rows whose non-user rows share the filler coordinate look collapsed by construction; the collapse
    check reads the transformer's own embeddings, the unit-norm check the published rows."""
    from hir_pipeline.model.publication import published_rows

    emb, probs = healthy
    rng = np.random.default_rng(2)
    structure = rng.normal(size=(200, 4)) * np.r_[[50.0], np.ones(199)][:, None]  # one very long row: R large
    rows = published_rows(emb, structure, 1.0, np.arange(200) >= 195)  # row 0 is an item
    assert not _verdicts(rows, probs)[CHECK_NAMES[2]]  # the filler alone makes the rows look alike
    verdicts = {c.name: c.passed for c in check_outputs(rows, probs, encoder_embeddings=emb)}
    assert verdicts == dict.fromkeys(CHECK_NAMES, True)
    point = _unit(np.ones((200, 16)) + rng.normal(size=(200, 16)) * 0.01)
    assert not {c.name: c.passed for c in check_outputs(rows, probs, encoder_embeddings=point)}[CHECK_NAMES[2]]


def test_mean_pairwise_cosine_is_the_mean_over_distinct_pairs():
    emb = _unit(np.random.default_rng(2).normal(size=(30, 5)))
    sims = emb @ emb.T
    expected = (sims.sum() - np.trace(sims)) / (30 * 29)
    assert mean_pairwise_cosine(emb) == pytest.approx(expected, abs=1e-6)


def test_thresholds_are_validated():
    with pytest.raises(ValueError, match="min_effective_rank"):
        OutputCheckConfig(min_effective_rank=0.5)
    with pytest.raises(ValueError, match="max_mean_cosine"):
        OutputCheckConfig(max_mean_cosine=2.0)
