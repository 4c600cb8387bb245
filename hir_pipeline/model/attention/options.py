"""How structural attention is computed: the settings shared by the dispatcher and the chunked path.

The settings never change the function (every path computes the same masked, biased attention), only which
implementation runs and how it splits the work.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionOptions:
    """Settings of :func:`~.dispatch.structural_attention` (and of :func:`~.chunked.chunked_structural_attention`,
    which reads ``scale``, ``block_size`` and ``checkpoint``).

    Args:
        backend: ``"auto"`` (see :mod:`~.dispatch`), ``"flex"``, ``"bucketed"``, ``"chunked"`` or ``"dense"``
            (reference).
        scale: score scale; ``None``: ``1 / sqrt(D)`` (as FlexAttention).
        block_size: query rows per block of the chunked path, and block size of a view block mask built by the
            dispatcher.
        compile_flex: compile FlexAttention; ``None``: on CUDA only. On CPU it also lets ``"auto"`` pick
            FlexAttention for gradient-free calls.
        checkpoint: chunked path: recompute each block in backward (``torch.utils.checkpoint``); ``None``: when
            autograd records.
    """

    backend: str = "auto"
    scale: float | None = None
    block_size: int = 128
    compile_flex: bool | None = None
    checkpoint: bool | None = None
