"""Downloads are checked against pinned SHA-256 digests before they enter the cache."""

from __future__ import annotations

import pytest

from hir_pipeline.data.integrity import PINNED_SHA256, IntegrityError, sha256_of, verify_download
from hir_pipeline.settings import cache_dir


def test_a_download_enters_the_cache_only_with_its_pinned_digest(tmp_path, monkeypatch):
    good = tmp_path / "a.jar"
    good.write_bytes(b"the real bytes")
    monkeypatch.setitem(PINNED_SHA256, "a.jar", sha256_of(good))
    assert verify_download(good) == good and good.exists()
    good.write_bytes(b"tampered bytes")
    with pytest.raises(IntegrityError, match=r"^a\.jar: SHA-256 [0-9a-f]{64} is not the pinned [0-9a-f]{64}"):
        verify_download(good)
    assert not good.exists(), "a file that fails the check is deleted"
    unknown = tmp_path / "b.whl"
    unknown.write_bytes(b"x")
    with pytest.raises(IntegrityError, match="no pinned SHA-256"):
        verify_download(unknown)


def test_the_pins_match_the_files_set_up_fetched():
    """The jars and the wheel in this machine's cache (``hir setup`` ran first) are the pinned ones."""
    found = {p.name: p for folder in ("jars", "downloads") for p in (cache_dir() / folder).glob("*")
             if p.name in PINNED_SHA256}
    assert set(found) == set(PINNED_SHA256), f"set-up did not fetch {set(PINNED_SHA256) - set(found)}"
    assert {name: sha256_of(p) for name, p in found.items()} == PINNED_SHA256
