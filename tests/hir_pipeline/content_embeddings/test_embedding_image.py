"""ImageEncoder (EfficientNet-Lite0 and a transformers vision model) and the all-modality ContentEmbedder."""

from __future__ import annotations

import gzip
import socket
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hir_pipeline.content_embeddings.config import EmbeddingConfig
from hir_pipeline.content_embeddings.content_hash import model_identifier
from hir_pipeline.content_embeddings.embedder import ContentEmbedder, entity_text
from hir_pipeline.content_embeddings.image import EFFICIENTNET_LITE0_DIM, ImageEncoder, ImageError
from hir_pipeline.settings import cache_dir
from tests.prerequisites import missing
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("images")
    gray = np.zeros((28, 28), dtype=np.uint8)
    gray[6:22, 10:18] = 220  # a bright "trouser-like" bar, Fashion-MNIST-sized grayscale
    Image.fromarray(gray, mode="L").save(root / "gray.png")
    rgb = np.random.default_rng(0).integers(0, 255, (40, 60, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(root / "rgb.jpg")
    (root / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return {"gray": str(root / "gray.png"), "rgb": str(root / "rgb.jpg"), "corrupt": str(root / "corrupt.png"),
            "missing": str(root / "nope.png"), "uri": (root / "gray.png").as_uri(), "remote": "hirnosuch://bucket/x.png"}


@pytest.fixture(scope="module")
def efficientnet() -> ImageEncoder:
    return ImageEncoder(EmbeddingConfig(image_batch_size=2))


def test_efficientnet_embeds_grayscale_and_reports_errors(efficientnet, images):
    uris = [images[k] for k in ("gray", "missing", "rgb", "corrupt", "uri", "remote")]
    vectors, errors = efficientnet.encode(uris)
    assert vectors.shape == (6, 1280) and efficientnet.dim == EFFICIENTNET_LITE0_DIM
    assert errors == [None, ImageError.MISSING_FILE, None, ImageError.UNREADABLE, None, ImageError.UNSUPPORTED_URI]
    np.testing.assert_allclose(np.linalg.norm(vectors[[0, 2, 4]], axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(vectors[[1, 3, 5]], 0)
    np.testing.assert_allclose(vectors[0], vectors[4], atol=1e-6)  # file:// URI == plain path
    assert vectors[0] @ vectors[2] < 0.999  # different images, different features


@pytest.fixture(scope="module")
def http_root(images):
    """``http://127.0.0.1:<port>`` of a real HTTP server (a thread) serving the images' folder."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(Path(images["gray"]).parent))
    handler.log_message = lambda *args: None  # keep the test output quiet
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_images_are_read_through_fsspec_from_paths_file_uris_and_http(efficientnet, images, http_root, tmp_path):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP backend needs aiohttp")
    spaced = tmp_path / "with space #1.png"
    spaced.write_bytes(Path(images["gray"]).read_bytes())
    with socket.socket() as s:  # a port nothing listens on: the fetch fails, the file is not "missing"
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/gray.png"
    uris = [images["gray"], spaced.as_uri(), str(spaced), f"{http_root}/gray.png", f"{http_root}/nope.png",
            f"{http_root}/corrupt.png", closed]
    vectors, errors = efficientnet.encode(uris)
    assert errors == [None, None, None, None, ImageError.MISSING_FILE, ImageError.UNREADABLE,
                      ImageError.FETCH_FAILED]
    for i in (1, 2, 3):  # the same bytes, whichever way they were reached
        np.testing.assert_allclose(vectors[i], vectors[0], atol=1e-6)


def test_unsupported_schemes_name_the_missing_backend():
    from hir_pipeline.content_embeddings.image import load_image

    assert load_image("hirnosuch://bucket/x.png") == ImageError.UNSUPPORTED_URI
    try:
        import s3fs  # noqa: F401
    except ImportError:  # s3:// is known to fsspec, but its package is not installed here
        assert load_image("s3://bucket/x.png") == ImageError.UNSUPPORTED_URI


def _fashion_mnist_files() -> tuple[Path, Path] | None:
    root = cache_dir() / "data"
    if not root.exists():
        return None
    images = sorted(root.rglob("t10k-images-idx3-ubyte*")) or sorted(root.rglob("*images-idx3-ubyte*"))
    for img in images:
        labels = list(img.parent.glob(img.name.replace("images-idx3", "labels-idx1")))
        if labels:
            return img, labels[0]
    return None


def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


@pytest.mark.slow
def test_real_fashion_mnist_same_class_is_closer(efficientnet, tmp_path):
    found = _fashion_mnist_files()
    if found is None:
        missing(f"Fashion-MNIST idx files under {cache_dir() / 'data'}", "run .venv/bin/hir setup")
    pixels, labels = _read_idx(found[0]), _read_idx(found[1])
    classes = (1, 7, 8)  # trouser, sneaker, bag: visually distinct
    uris, ys = [], []
    for c in classes:
        for k, idx in enumerate(np.flatnonzero(labels == c)[:6]):
            path = tmp_path / f"{c}_{k}.png"
            Image.fromarray(pixels[idx], mode="L").save(path)
            uris.append(str(path))
            ys.append(c)
    vectors, errors = efficientnet.encode(uris)
    assert errors == [None] * len(uris)
    sims, ys = vectors @ vectors.T, np.array(ys)
    same = (ys[:, None] == ys[None, :]) & ~np.eye(len(ys), dtype=bool)
    assert sims[same].mean() > sims[ys[:, None] != ys[None, :]].mean() + 0.05


def test_transformers_vision_model(tmp_path, images):
    folder = build_tiny_image_model(tmp_path / "vit", hidden_size=24)
    enc = ImageEncoder(EmbeddingConfig(image_model=str(folder)))
    vectors, errors = enc.encode([images["gray"], images["missing"], images["rgb"]])
    assert enc.dim == 24 and vectors.shape == (3, 24)
    assert errors == [None, ImageError.MISSING_FILE, None]
    np.testing.assert_allclose(np.linalg.norm(vectors[[0, 2]], axis=1), 1.0, atol=1e-5)


def test_entity_text():
    assert entity_text(" Red shoe ", "Fast.") == "Red shoe. Fast."
    assert entity_text("Sale!", "now") == "Sale! now"
    assert entity_text(None, "  only description ") == "only description"
    assert entity_text("  ", None) is None


def test_content_embedder_keeps_text_when_image_fails(tmp_path, images):
    text_model = build_tiny_text_model(tmp_path / "txt")
    config = EmbeddingConfig(text_model=str(text_model), image_model=str(build_tiny_image_model(tmp_path / "vit")))
    emb = ContentEmbedder(config)
    out = emb.embed(
        ["red shoe", "blue bag", None, None, None],
        [None, "premium leather", None, None, None],
        [images["missing"], images["rgb"], images["corrupt"], None, images["gray"]],
        [None, '{"brand": "acme"}', None, '{"price": 3}', None],
    )
    assert out.image_error == [ImageError.MISSING_FILE, None, ImageError.UNREADABLE, None, None]
    assert out.text[0] is not None and out.image[0] is None and out.fused[0] is not None
    assert all(v is not None for v in (out.text[1], out.image[1], out.attributes[1], out.fused[1]))
    assert out.fused[2] is None  # a broken image was its only content: no vector, never a zero vector
    assert out.text[3] is None and out.fused[3] is not None  # attributes alone
    assert out.fused[4] is not None and out.text[4] is None  # image alone
    widths = {v.shape[0] for v in out.fused if v is not None}
    assert widths == {emb.fusion.dim}
    for v in (v for v in out.fused if v is not None):
        assert abs(np.linalg.norm(v) - 1) < 1e-5


def test_rebuilding_a_model_in_place_changes_the_identifier(tmp_path):
    folder = tmp_path / "txt"
    build_tiny_text_model(folder, seed=0)
    image = str(build_tiny_image_model(tmp_path / "vit"))
    before = model_identifier(EmbeddingConfig(text_model=str(folder), image_model=image))
    build_tiny_text_model(folder, seed=1)  # same path, new weights
    assert model_identifier(EmbeddingConfig(text_model=str(folder), image_model=image)) != before


def test_bfloat16_matches_float32_on_real_models(images):
    """The bfloat16 path (autocast) gives the same vectors as float32 up to rounding, on MiniLM and EfficientNet."""
    texts = ["Men's red running shoes with breathable mesh", "Stainless steel espresso machine", "laptop"]
    uris = [images["gray"], images["rgb"], None]
    columns = (texts, [None, "with milk frother", None], uris, [None, None, None])
    fp32 = ContentEmbedder(EmbeddingConfig(device="cpu", precision="float32")).embed(*columns)
    bf16 = ContentEmbedder(EmbeddingConfig(device="cpu", precision="bfloat16")).embed(*columns)
    for kind, floor in (("text", 0.999), ("image", 0.99), ("fused", 0.995)):
        for a, b in zip(getattr(fp32, kind), getattr(bf16, kind), strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert float(a @ b) > floor, kind
    assert not np.array_equal(fp32.image[0], bf16.image[0])  # bfloat16 really ran: its rounding shows


def test_any_corrupt_image_file_is_a_row_error_never_an_exception(tmp_path):
    """Random byte flips and truncations of valid files of eight formats: each loads or is ``unreadable_image``."""
    import io
    import random
    import warnings

    from hir_pipeline.content_embeddings.image import load_image

    rng = random.Random(0)
    pixels = np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    path = tmp_path / "x"
    outcomes = set()
    for fmt in ("PNG", "GIF", "BMP", "JPEG", "TIFF", "WEBP", "ICO", "PPM"):
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, fmt)
        for _ in range(60):
            data = bytearray(buf.getvalue())
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            path.write_bytes(bytes(data[: rng.randrange(8, len(data))] if rng.random() < 0.3 else data))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Pillow warns about the corrupt metadata it skips
                loaded = load_image(str(path))
            assert loaded == ImageError.UNREADABLE or isinstance(loaded, Image.Image), loaded
            outcomes.add("error" if isinstance(loaded, str) else "image")
    assert outcomes == {"error", "image"}
