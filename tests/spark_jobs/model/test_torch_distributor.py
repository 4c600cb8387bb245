"""Data-parallel training of the interest model through Spark's ``TorchDistributor``: where the ranks run
(local master: ``torchrun`` processes on the driver, else executors), and ``fit_and_embed`` with ``processes=2`` on
a real local Spark session trains the same model as two ranks launched directly, then embeds every node."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hir_pipeline.model.refine import spherical_kmeans
from hir_pipeline.training.distributed import save_inputs
from hir_pipeline.training.fit import fit_and_embed, resolve_model_config
from hir_pipeline.training.inference import head_projections
from spark_jobs.model.distributor import distributor_choice, is_local_master, torch_distributor_launch
from tests.hir_pipeline.training.test_data_parallel import MODEL, TRAIN, _run_ranks, toy_inputs


def test_local_mode_follows_the_master_and_use_gpu_the_device():
    assert is_local_master("local") and is_local_master("local[2]") and is_local_master("local[*, 3]")
    assert not is_local_master("spark://host:7077") and not is_local_master("yarn")
    assert not is_local_master("local-cluster[2,1,1024]")  # separate executor JVMs: a cluster to the distributor
    assert distributor_choice("local[2]", "cpu") == (True, False)
    assert distributor_choice("spark://host:7077", "cpu") == (False, False)
    assert distributor_choice("yarn", "cuda") == (False, True)
    assert distributor_choice("local[4]", "cuda:0") == (True, True)
    assert distributor_choice("local[2]", "auto", cuda_available=True) == (True, True)
    assert distributor_choice("k8s://api:6443", "auto", cuda_available=False) == (False, False)
    assert distributor_choice("local[2]", "cpu", mode="cluster") == (False, False)
    assert distributor_choice("spark://host:7077", "cpu", mode="local") == (True, False)
    with pytest.raises(ValueError, match="distributor mode"):
        distributor_choice("local[2]", "cpu", mode="driver")
    with pytest.raises(ValueError, match="distributor mode"):
        torch_distributor_launch(None, mode="everywhere")


@pytest.mark.slow
def test_two_processes_train_through_torch_distributor_like_two_direct_ranks(spark, tmp_path):
    inputs = toy_inputs()
    train = dataclasses.replace(TRAIN, processes=2)
    calls = []
    launch = torch_distributor_launch(spark)

    def recorded(*args):
        calls.append(args)
        return launch(*args)

    result = fit_and_embed(inputs, MODEL, train, tmp_path / "ckpt", on_epoch_end=lambda e, m: calls.append(e),
                           launch=recorded)
    assert len(calls[0]) == 5 and calls[1:] == list(range(TRAIN.epochs))  # one launch, then every epoch replayed
    assert not (tmp_path / "ckpt" / "inputs.pkl").exists()

    direct = _run_ranks(2, str(save_inputs(inputs, tmp_path / "inputs.pkl")), MODEL, tmp_path / "ranks")
    state = torch.load(direct[0]["checkpoint"], map_location="cpu", weights_only=True)
    published = result.model.state_dict()
    assert published.keys() == state["student"].keys()
    # bit for bit, same seed: the trained network, and its prototypes as refined after training (from the ranks' ones)
    protos = {k for k in published if k.startswith("hierarchy.prototypes.")}
    assert protos and all(torch.equal(published[k].cpu(), state["student"][k]) for k in published.keys() - protos)
    z = head_projections(result.model, result.inference.embeddings)
    for k in protos:
        refined = spherical_kmeans(z, state["student"][k], train.prototype_refinement_iters)
        assert torch.equal(published[k].cpu(), refined)
    assert [m["loss"] for m in result.history] == [m["loss"] for m in direct[0]["history"]]
    assert result.fingerprint == direct[0]["fingerprint"] and result.train_cfg.processes == 2

    cfg = resolve_model_config(MODEL, inputs)
    assert result.inference.embeddings.shape == (inputs.num_nodes, cfg.out_dim)
    assert [p.shape for p in result.inference.probs] == [(inputs.num_nodes, k) for k in cfg.level_sizes]
    assert len(result.history) == TRAIN.epochs and result.resumed_epochs == 0
