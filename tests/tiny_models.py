"""Tiny, randomly initialised text and image models written to a folder, for fast tests (test helper only).

They have the same on-disk layout as real Hugging Face models (config, weights, tokenizer / image processor), so
the production loading path (``local_files_only=True``) is what gets exercised; only the sizes differ.
"""

from __future__ import annotations

from pathlib import Path

import torch

#: A small English vocabulary for the tiny WordPiece tokenizer (unknown words map to ``[UNK]``).
TINY_WORDS: tuple[str, ...] = (
    "red", "blue", "green", "black", "white", "shoe", "shoes", "running", "shirt", "dress", "bag", "phone",
    "laptop", "camera", "coffee", "tea", "book", "sale", "new", "men", "women", "kids", "sport", "summer",
    "winter", "leather", "cotton", "wireless", "fast", "cheap", "premium", "brand", "store", "shop", "ad",
    "campaign", "product", "category", "the", "a", "for", "with", "and", "of", "in", "on", ".", ",", "!", "-",
    "##s", "##ing", "##ed", "##er", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
)
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def build_tiny_text_model(folder: str | Path, *, seed: int = 0, hidden_size: int = 32, layers: int = 2,
                          words: tuple[str, ...] = TINY_WORDS) -> Path:
    """Save a random tiny BERT (Devlin et al., 2019) and a WordPiece tokenizer built offline to ``folder``.

    The tokenizer's vocabulary is ``[PAD] [UNK] [CLS] [SEP] [MASK]`` + ``words`` (ids in that order).

    Args:
        folder: output folder (created).
        seed: torch seed of the random weights; different seeds give different "models".
        hidden_size: width of the model (= text embedding width).
        layers: transformer layers.
        words: vocabulary besides the special tokens.
    """
    from transformers import BertConfig, BertModel, BertTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = (*SPECIAL_TOKENS, *words)
    # transformers 5's BertTokenizer takes the vocabulary itself (a path or a dict), not ``vocab_file``.
    BertTokenizer(vocab={tok: i for i, tok in enumerate(tokens)}, do_lower_case=True).save_pretrained(str(folder))
    config = BertConfig(vocab_size=len(tokens), hidden_size=hidden_size,
                        num_hidden_layers=layers, num_attention_heads=2, intermediate_size=2 * hidden_size,
                        max_position_embeddings=128)
    torch.manual_seed(seed)
    BertModel(config).eval().save_pretrained(str(folder))
    return folder


def build_tiny_image_model(folder: str | Path, *, seed: int = 0, image_size: int = 32, hidden_size: int = 32) -> Path:
    """Save a random tiny ViT (Dosovitskiy et al., 2021) and its image processor to ``folder``.

    Args:
        folder: output folder (created).
        seed: torch seed of the random weights.
        image_size: input resolution (images are resized to it by the processor).
        hidden_size: width of the model (= image embedding width).
    """
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = ViTConfig(image_size=image_size, patch_size=8, hidden_size=hidden_size, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=2 * hidden_size)
    torch.manual_seed(seed)
    ViTModel(config).eval().save_pretrained(str(folder))
    ViTImageProcessor(size={"height": image_size, "width": image_size}).save_pretrained(str(folder))
    return folder
