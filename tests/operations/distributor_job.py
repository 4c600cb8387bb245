"""The driver program of the ``TorchDistributor`` cluster test: ``fit_and_embed`` with ``processes=2`` through
``torch_distributor_launch`` on the Spark master given on the command line, run in its own process (a test process
already holds a local SparkContext).

Writes ``<out>/summary.json`` (the distributor's choice, the loss history, the fingerprint) and
``<out>/published.pt`` (the published encoder's state dict) for the test to compare with ranks launched directly.

    python -m tests.operations.distributor_job --master spark://127.0.0.1:7077 --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
from pyspark.sql import SparkSession

from hir_pipeline.training.fit import fit_and_embed
from spark_jobs.model.distributor import distributor_choice, torch_distributor_launch
from tests.hir_pipeline.training.test_data_parallel import MODEL, TRAIN, toy_inputs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    spark = (SparkSession.builder.master(args.master).appName("hir-distributor")
             .config("spark.executor.cores", "2").config("spark.executor.memory", "1g")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        train = dataclasses.replace(TRAIN, processes=2)
        result = fit_and_embed(toy_inputs(), MODEL, train, args.out / "ckpt", launch=torch_distributor_launch(spark))
        local_mode, use_gpu = distributor_choice(spark.conf.get("spark.master"), train.device)
    finally:
        spark.stop()
    torch.save(result.model.state_dict(), args.out / "published.pt")
    (args.out / "summary.json").write_text(json.dumps({
        "local_mode": local_mode, "use_gpu": use_gpu, "fingerprint": result.fingerprint,
        "losses": [m["loss"] for m in result.history], "num_embeddings": len(result.inference.embeddings),
    }))


if __name__ == "__main__":
    main()
