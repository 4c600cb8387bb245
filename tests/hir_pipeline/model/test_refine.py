"""Prototype refinement: spherical k-means started from the learned prototypes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hir_pipeline.model.refine import assignment_sizes, spherical_kmeans


def _blobs(k: int = 4, per: int = 30, dim: int = 8, spread: float = 0.05, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(k, dim, generator=g), dim=-1)
    points = centres.repeat_interleave(per, 0) + spread * torch.randn(k * per, dim, generator=g)
    return F.normalize(points, dim=-1), centres, torch.arange(k).repeat_interleave(per)


def test_collapsed_prototypes_are_split_into_the_groups_the_points_hold():
    points, centres, labels = _blobs()
    # four copies of one prototype: the start assigns every point to prototype 0 (ties: the lowest index)
    init = points[:1].expand(4, -1)
    assert assignment_sizes(points, init).tolist() == [120, 0, 0, 0]
    refined = spherical_kmeans(points, init, iters=10)
    assign = (points @ refined.t()).argmax(1)
    assert sorted(assignment_sizes(points, refined).tolist()) == [30, 30, 30, 30]
    for group in range(4):  # one cluster per planted group
        assert len(set(assign[labels == group].tolist())) == 1
    assert torch.allclose(refined.norm(dim=-1), torch.ones(4))


def test_prototypes_that_already_sit_on_the_groups_keep_their_identity():
    points, centres, labels = _blobs()
    refined = spherical_kmeans(points, centres.flip(0), iters=5)
    assign = (points @ refined.t()).argmax(1)
    assert assign.tolist() == (3 - labels).tolist()  # prototype i stays on the group it started on
    assert (F.cosine_similarity(refined, centres.flip(0)) > 0.99).all()


def test_zero_iterations_return_the_normalised_start_and_the_result_is_deterministic():
    points, centres, _ = _blobs(seed=1)
    init = 3.0 * centres
    assert torch.allclose(spherical_kmeans(points, init, iters=0), centres)
    assert torch.equal(spherical_kmeans(points, init[[0, 0, 1, 2]], 7), spherical_kmeans(points, init[[0, 0, 1, 2]], 7))
