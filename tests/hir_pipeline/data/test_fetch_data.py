"""Fetching and parsing the public datasets behind the built-in sources (real downloads, cached)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from hir_pipeline.data.fetch import (
    DataUnavailable,
    _read_idx,
    fetch_fashion_mnist,
    load_fashion_mnist,
    movielens_files,
)
from hir_pipeline.settings import cache_dir
from tests.prerequisites import missing


def _lines(path) -> int:
    with open(path) as fh:
        return sum(1 for _ in fh)


def test_movielens_files_are_the_100k_release():
    files = movielens_files(cache_dir())
    assert set(files) == {"inter", "item", "user", "kg", "link"}
    # one header line each: 100,000 ratings, 1,682 movies, 943 users
    assert _lines(files["inter"]) == 100_001
    assert _lines(files["item"]) == 1_683
    assert _lines(files["user"]) == 944
    assert files["kg"].read_text().count("\tfilm.film.production_companies\t") > 1000
    assert movielens_files(cache_dir()) == files  # cached: same paths, no re-extraction


def test_read_idx_parses_plain_and_gzipped(tmp_path):
    data = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = bytes([0, 0, 0x08, 3]) + b"".join(d.to_bytes(4, "big") for d in data.shape) + data.tobytes()
    (tmp_path / "x-idx3-ubyte").write_bytes(raw)
    with gzip.open(tmp_path / "y-idx3-ubyte.gz", "wb") as fh:
        fh.write(raw)
    np.testing.assert_array_equal(_read_idx(tmp_path / "x-idx3-ubyte"), data)
    np.testing.assert_array_equal(_read_idx(tmp_path / "y-idx3-ubyte.gz"), data)
    (tmp_path / "bad").write_bytes(bytes([0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0]))  # float idx
    with pytest.raises(ValueError, match="not a uint8 idx"):
        _read_idx(tmp_path / "bad")


def test_fashion_mnist_loads_real_images():
    try:
        folder = fetch_fashion_mnist(cache_dir())
    except DataUnavailable as exc:  # not a Debian system / no package index reachable
        missing("Fashion-MNIST", f"{exc}; run .venv/bin/hir setup on a Debian system")
    images, labels = load_fashion_mnist(folder, "t10k")
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10_000,)
    assert np.bincount(labels, minlength=10).tolist() == [1000] * 10  # the test split is balanced
    assert images.mean() > 30 and images.max() == 255  # real pictures, not zeros
    with pytest.raises(ValueError):
        load_fashion_mnist(folder, "validation")
