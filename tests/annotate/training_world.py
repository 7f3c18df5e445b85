"""A dataset version made the way the product makes one, for the shard, export and near-duplicate tests.

Two vendors' synthetic drops (robot episodes and videos that transcode into several clips each) are landed,
gated, transcoded, annotated and grouped by the real steps, the warehouse is synced and a dataset spec is
built: what the vendor DAGs and ``sluice dataset build`` do, without Airflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_world import World, batch_items, land, vendor_from_example

from pipeline.config import VendorConfig
from pipeline.datasets import DatasetSpec, DatasetVersion, build
from pipeline.steps.base import WorkItem
from pipeline.steps.runner import run_step
from pipeline.synth import RobotDropConfig, VideoDropConfig, make_robot_drop, make_video_drop

#: Annotators both vendors run: what near-duplicate grouping reads.
FINGERPRINTS = {"message_fingerprint": {"version": "1"}, "video_phash": {"version": "1"}}


@dataclass
class TrainingWorld:
    world: World
    robot: VendorConfig
    video: VendorConfig
    robot_episodes: dict[str, int]  # drop path -> episode id
    video_episodes: dict[str, int]
    robot_drop: Path
    video_drop: Path

    def spec(self, name: str = "mixed", **overrides: Any) -> DatasetSpec:
        data: dict[str, Any] = {
            "name": name,
            "filter": {
                "where": "vendor IN $vendors AND is_accepted",
                "params": {"vendors": [self.robot.name, self.video.name]},
            },
            "sample": {"seed": 1, "fraction": 1.0},
            "splits": {"group_by": ["session_id"], "seed": 3, "val_fraction": 0.5, "eval_fraction": 0.0},
        }
        data.update(overrides)
        return DatasetSpec.model_validate(data)

    def build(self, spec: DatasetSpec) -> DatasetVersion:
        from pipeline.warehouse import sync

        ctx = self.world.ctx
        sync(ctx.engine, self.world.settings.warehouse_path)
        return build(
            spec, engine=ctx.engine, warehouse_path=self.world.settings.warehouse_path, store=ctx.store
        )


def _items(world: World, episodes: dict[str, int]) -> list[WorkItem]:
    return [WorkItem(key=str(e), episode_id=e, source_path=p) for p, e in sorted(episodes.items())]


def make_training_world(
    world: World, root: Path, *, robot_episodes: int = 2, videos: int = 2, extra_videos: Any = None
) -> TrainingWorld:
    """Land, gate, transcode and annotate a robot and a video drop under ``root``; group near-duplicates.

    ``extra_videos(video_drop)`` may add files (a re-encoded copy, say) before the video drop is landed.
    """
    from pipeline.dedup import run_dedup
    from pipeline.steps.annotate import AnnotateStep
    from pipeline.steps.transcode import TranscodeStep

    robot_drop, video_drop = root / "robot", root / "video"
    make_robot_drop(robot_drop, RobotDropConfig(episodes=robot_episodes, seconds=2, width=64, height=48))
    # 4 s with one hard cut: each video becomes two clips of about 2 s
    make_video_drop(video_drop, VideoDropConfig(clips=videos, seconds=4, scene_cuts=1))
    if extra_videos is not None:
        extra_videos(video_drop)
    robot = vendor_from_example("acme_robotics", robot_drop, annotate={"annotators": FINGERPRINTS})
    video = vendor_from_example(
        "northwind_video", video_drop, annotate={"annotators": {"video_phash": {"version": "1"}}}
    )
    robot_eps = land(world, robot, robot_drop, "*.mcap")
    video_eps = land(world, video, video_drop, "*.mp4")
    for vendor, episodes in ((robot, robot_eps), (video, video_eps)):
        run_step(TranscodeStep(vendor, world.ctx), _items(world, episodes))
    run_step(AnnotateStep(robot, world.ctx), batch_items(robot_drop, "*.mcap"))
    run_step(AnnotateStep(video, world.ctx), batch_items(video_drop, "*.mp4"))
    run_dedup(world.ctx.engine)
    return TrainingWorld(world, robot, video, robot_eps, video_eps, robot_drop, video_drop)
