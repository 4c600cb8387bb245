"""Pinned SHA-256 digests of the files set-up downloads, checked before a download enters the cache.

A download that does not match (a tampered mirror, a truncated transfer, a re-published artifact) is deleted and
the set-up stops with one line naming the file and both digests; nothing unverified is ever cached. A file without
a pinned digest is refused the same way, so that a version bump pins its new files. (The Debian package of
Fashion-MNIST is verified by apt's own signed package lists.)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: File name -> SHA-256 of the artifacts fetched by ``hir setup``: the Delta jars from Maven Central (resolved by
#: Spark's Ivy) and the RecBole wheel from PyPI (holding MovieLens-100k).
PINNED_SHA256: dict[str, str] = {
    "io.delta_delta-spark_2.13-4.0.1.jar": "a1e76860b19fe1e6b205a4ea7a9099a2f9575d39bb71d49b3e679b299d0efb91",
    "io.delta_delta-storage-4.0.1.jar": "ecc42c5aaa51c423312d9e4e48aa4a12b34740bf2c37de0e8f279277ec3d12e4",
    "recbole-1.2.1-py3-none-any.whl": "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407",
}


class IntegrityError(RuntimeError):
    """A downloaded file does not match its pinned digest (or has none)."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_download(path: Path) -> Path:
    """Return ``path`` if its SHA-256 is the pinned one; otherwise delete it and raise :class:`IntegrityError`."""
    path = Path(path)
    want = PINNED_SHA256.get(path.name)
    got = sha256_of(path)
    if want == got:
        return path
    path.unlink(missing_ok=True)
    if want is None:
        raise IntegrityError(f"{path.name}: no pinned SHA-256 (got {got}); add it to "
                             "hir_pipeline.data.integrity.PINNED_SHA256 after checking the file")
    raise IntegrityError(f"{path.name}: SHA-256 {got} is not the pinned {want}; the download was deleted")
