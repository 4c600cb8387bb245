"""The publication's pictures are MLflow images keyed by picture, one step per run date (a real local store)."""

from __future__ import annotations

import datetime as dt
import io

import numpy as np
from PIL import Image

from assets.publish import log_pictures, run_date_step
from hir_pipeline.publish.pictures import ClusterNode, hierarchy_sunburst_png
from tests.assets.publish_fixtures import logged_images


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (24, 16), color).save(buf, "PNG")
    return buf.getvalue()


def test_run_date_step_is_the_date_as_yyyymmdd_and_increases_with_it():
    assert run_date_step(dt.date(2024, 1, 5)) == 20240105
    days = [dt.date(2023, 12, 31) + dt.timedelta(days=i) for i in range(40)]
    assert sorted(days, key=run_date_step) == days


def test_pictures_of_successive_nights_form_one_series_per_key(tmp_path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("pictures", artifact_location=(tmp_path / "artifacts").as_uri())
    nodes = [ClusterNode(0, 0, None, 10, "shoes"), ClusterNode(0, 1, None, 6, "tea"),
             ClusterNode(1, 0, 0, 7, "running shoes"), ClusterNode(1, 1, 0, 3, "boots"),
             ClusterNode(1, 2, 1, 6, "green tea")]
    nights = {dt.date(2024, 1, 5): _png((200, 30, 30)), dt.date(2024, 1, 6): _png((30, 30, 200))}
    runs = {}
    for day, map_png in nights.items():
        run_id = runs[day] = client.create_run(experiment).info.run_id
        log_pictures(client, run_id, {"cluster_hierarchy.png": hierarchy_sunburst_png(nodes, f"Hierarchy, {day}"),
                                      "embedding_map.png": map_png}, day)

    for day, run_id in runs.items():
        logged = logged_images(client, run_id)
        step = run_date_step(day)
        assert set(logged) == {("publish/cluster_hierarchy", step), ("publish/embedding_map", step)}
        assert client.get_run(run_id).data.tags["mlflow.loggedImages"] == "True"
        local = client.download_artifacts(run_id, logged[("publish/embedding_map", step)], str(tmp_path / "dl"))
        with Image.open(local) as got, Image.open(io.BytesIO(nights[day])) as sent:
            np.testing.assert_array_equal(np.asarray(got.convert("RGB")), np.asarray(sent.convert("RGB")))
