"""The ingest-side writers (vendors, blobs, source files, calibrations, episodes, streams), as the writer."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.catalog import repo
from pipeline.catalog.errors import (
    CatalogConflictError,
    CatalogMissingError,
    CatalogValueError,
    HistoryRewriteError,
)
from pipeline.catalog.models import Blob, Calibration, Episode, EpisodeStateChange, SourceFile, Stream, Vendor
from pipeline.enums import FileState, ReasonCode, SourceKind, StreamRole
from pipeline.errors import UnknownChoiceError

pytestmark = pytest.mark.integration


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _count(session: Session, model: type) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(model)).scalar_one()


@pytest.fixture
def vendor_id(writer_session: Session) -> int:
    return repo.upsert_vendor(writer_session, name="acme", kind="mcap", config_hash="c1", config={"a": 1})


def _episode(session: Session, vendor_id: int, name: str, content: str | None = None) -> int:
    sha = _sha(content or name)
    blob_id = repo.register_blob(session, sha256=sha, size_bytes=10, raw_uri=f"raw/{sha}")
    source = repo.register_source_file(session, vendor_id=vendor_id, path=name, blob_id=blob_id)
    return repo.ensure_episode(
        session, vendor_id=vendor_id, source_file_id=source.id, blob_id=blob_id, kind="mcap"
    ).id


def test_upsert_vendor_updates_a_changed_config_only(writer_session: Session, vendor_id: int) -> None:
    assert (
        repo.upsert_vendor(writer_session, name="acme", kind="mcap", config_hash="c1", config={}) == vendor_id
    )
    assert writer_session.get(Vendor, vendor_id).config == {"a": 1}
    changed = repo.upsert_vendor(writer_session, name="acme", kind="mcap", config_hash="c2", config={"a": 2})
    assert changed == vendor_id
    row = writer_session.execute(sa.select(Vendor.config_hash, Vendor.config)).one()
    assert tuple(row) == ("c2", {"a": 2})
    with pytest.raises(UnknownChoiceError, match="'lidar'; allowed: mcap, video"):
        repo.upsert_vendor(writer_session, name="acme", kind="lidar", config_hash="c3", config={})


def test_register_blob_is_write_once(writer_session: Session) -> None:
    sha = _sha("payload")
    first = repo.register_blob(writer_session, sha256=sha, size_bytes=7, raw_uri=f"raw/{sha}")
    assert repo.register_blob(writer_session, sha256=sha, size_bytes=7, raw_uri="elsewhere") == first
    assert writer_session.execute(sa.select(Blob.raw_uri)).scalar_one() == f"raw/{sha}"
    assert repo.find_blob(writer_session, sha) == first
    assert repo.find_blob(writer_session, _sha("other")) is None
    with pytest.raises(CatalogConflictError, match="recorded as 7; refusing to change it to 8"):
        repo.register_blob(writer_session, sha256=sha, size_bytes=8, raw_uri=f"raw/{sha}")
    with pytest.raises(CatalogValueError, match="64 lower-case hex digits"):
        repo.register_blob(writer_session, sha256=sha.upper(), size_bytes=7, raw_uri="raw/x")
    with pytest.raises(CatalogValueError, match="size_bytes -1"):
        repo.register_blob(writer_session, sha256=_sha("neg"), size_bytes=-1, raw_uri="raw/x")
    assert _count(writer_session, Blob) == 1


def test_a_path_keeps_every_content_as_a_version(writer_session: Session, vendor_id: int) -> None:
    blob_a = repo.register_blob(writer_session, sha256=_sha("a"), size_bytes=1, raw_uri="raw/a")
    blob_b = repo.register_blob(writer_session, sha256=_sha("b"), size_bytes=1, raw_uri="raw/b")
    first = repo.register_source_file(writer_session, vendor_id=vendor_id, path="x/1.mcap", blob_id=blob_a)
    again = repo.register_source_file(writer_session, vendor_id=vendor_id, path="x/1.mcap", blob_id=blob_a)
    alias = repo.register_source_file(writer_session, vendor_id=vendor_id, path="x/copy.mcap", blob_id=blob_a)
    assert (first.created, again.created, alias.created) == (True, False, True)
    assert again.id == first.id != alias.id
    changed = repo.register_source_file(
        writer_session, vendor_id=vendor_id, path="x/1.mcap", blob_id=blob_b, source_state={"size": 1}
    )
    assert (changed.created, changed.version) == (True, 2)
    # The first bytes back under the same path are the first version, not a third.
    back = repo.register_source_file(writer_session, vendor_id=vendor_id, path="x/1.mcap", blob_id=blob_a)
    assert (back.id, back.created, back.version) == (first.id, False, 1)
    rows = writer_session.execute(
        sa.select(SourceFile.path, SourceFile.version, SourceFile.blob_id, SourceFile.source_state).order_by(
            SourceFile.id
        )
    ).all()
    assert [tuple(r) for r in rows] == [
        ("x/1.mcap", 1, blob_a, None),
        ("x/copy.mcap", 1, blob_a, None),
        ("x/1.mcap", 2, blob_b, {"size": 1}),
    ]


def test_episode_metadata_fills_in_and_state_is_canonical(writer_session: Session, vendor_id: int) -> None:
    episode_id = _episode(writer_session, vendor_id, "e1.mcap")
    sha = _sha("e1.mcap")
    blob_id = repo.find_blob(writer_session, sha)
    source_id = writer_session.execute(sa.select(SourceFile.id)).scalar_one()
    again = repo.ensure_episode(
        writer_session,
        vendor_id=vendor_id,
        source_file_id=source_id,
        blob_id=blob_id,
        kind=SourceKind.MCAP,
        robot_id="r1",
        start_time_ns=1_000_000_000,
        end_time_ns=3_500_000_000,
    )
    assert again == (episode_id, False)
    repo.set_episode_metadata(writer_session, episode_id, session_id="s1", robot_id=None)
    episode = writer_session.execute(sa.select(Episode)).scalar_one()
    writer_session.refresh(episode)
    assert (episode.robot_id, episode.session_id, episode.duration_s) == ("r1", "s1", 2.5)
    assert episode.state == FileState.PENDING

    stored = repo.set_episode_state(
        writer_session,
        episode_id,
        "accepted_with_flags",
        reasons=["crc_absent", ReasonCode.CLOCK_SKEW, "crc_absent"],
    )
    assert stored == ["clock_skew", "crc_absent"]
    merged = repo.set_episode_state(
        writer_session,
        episode_id,
        FileState.QUARANTINED,
        reasons=["psnr_below_threshold"],
        merge_reasons=True,
    )
    assert merged == ["clock_skew", "crc_absent", "psnr_below_threshold"]
    writer_session.refresh(episode)
    assert (episode.state, episode.reasons) == ("quarantined", merged)

    with pytest.raises(UnknownChoiceError, match="reason code 'gremlins'"):
        repo.set_episode_state(writer_session, episode_id, "quarantined", reasons=["gremlins"])
    with pytest.raises(CatalogValueError, match="duplicate_of_id"):
        repo.set_episode_state(writer_session, episode_id, "duplicate")
    with pytest.raises(CatalogMissingError, match="episode with id 999"):
        repo.set_episode_state(writer_session, 999, "accepted")
    with pytest.raises(HistoryRewriteError, match="never goes back to pending"):
        repo.set_episode_state(writer_session, episode_id, "pending")
    # each refusal left the transaction usable, and the history holds the two changes made
    history = writer_session.execute(
        sa.select(EpisodeStateChange.from_state, EpisodeStateChange.to_state).order_by(EpisodeStateChange.id)
    ).all()
    assert [tuple(h) for h in history] == [
        ("pending", "accepted_with_flags"),
        ("accepted_with_flags", "quarantined"),
    ]
    with pytest.raises(CatalogValueError, match="episode field \\['colour'\\]"):
        repo.set_episode_metadata(writer_session, episode_id, colour="red")
    with pytest.raises(CatalogConflictError, match="kind of the episode"):
        repo.ensure_episode(
            writer_session, vendor_id=vendor_id, source_file_id=source_id, blob_id=blob_id, kind="video"
        )


def test_claim_original_names_the_first_copy(writer_session: Session, vendor_id: int) -> None:
    first = _episode(writer_session, vendor_id, "a.mcap", content="same bytes")
    second = _episode(writer_session, vendor_id, "b.mcap", content="same bytes")
    other = _episode(writer_session, vendor_id, "c.mcap", content="other bytes")
    blob_id = repo.find_blob(writer_session, _sha("same bytes"))
    assert repo.claim_original(writer_session, blob_id=blob_id, episode_id=first) == second
    repo.set_episode_state(writer_session, first, "duplicate", duplicate_of_id=second)
    # The copy now marked duplicate is no longer anyone's original.
    assert repo.claim_original(writer_session, blob_id=blob_id, episode_id=second) is None
    other_blob = repo.find_blob(writer_session, _sha("other bytes"))
    assert repo.claim_original(writer_session, blob_id=other_blob, episode_id=other) is None


def test_calibration_windows_may_not_overlap(writer_session: Session, vendor_id: int) -> None:
    cal_1 = repo.upsert_calibration(
        writer_session, vendor_id=vendor_id, calibration_key="c1", robot_id="r1",
        valid_from_ns=0, valid_to_ns=100, cameras={"front": {"fx": 1.0}},
    )  # fmt: skip
    cal_2 = repo.upsert_calibration(
        writer_session, vendor_id=vendor_id, calibration_key="c2", robot_id="r1",
        valid_from_ns=100, valid_to_ns=None, cameras={},
    )  # fmt: skip
    other_robot = repo.upsert_calibration(
        writer_session, vendor_id=vendor_id, calibration_key="c3", robot_id="r2",
        valid_from_ns=50, valid_to_ns=150, cameras={},
    )  # fmt: skip
    assert len({cal_1, cal_2, other_robot}) == 3
    with pytest.raises(CatalogConflictError, match="robot 'r1'"):
        repo.upsert_calibration(
            writer_session, vendor_id=vendor_id, calibration_key="c4", robot_id="r1",
            valid_from_ns=90, valid_to_ns=110, cameras={},
        )  # fmt: skip
    # The refused write ran in a savepoint: the transaction is still usable.
    assert _count(writer_session, Calibration) == 3
    found = [
        repo.find_calibration(writer_session, vendor_id=vendor_id, robot_id="r1", time_ns=t)
        for t in (0, 99, 100, 10**18)
    ]
    assert found == [cal_1, cal_1, cal_2, cal_2]
    assert repo.find_calibration(writer_session, vendor_id=vendor_id, robot_id="r1", time_ns=-1) is None
    # A re-delivery of c1 with corrected intrinsics updates the same row.
    again = repo.upsert_calibration(
        writer_session, vendor_id=vendor_id, calibration_key="c1", robot_id="r1",
        valid_from_ns=0, valid_to_ns=100, cameras={"front": {"fx": 2.0}},
    )  # fmt: skip
    assert again == cal_1
    assert writer_session.get(Calibration, cal_1, populate_existing=True).cameras == {"front": {"fx": 2.0}}
    with pytest.raises(CatalogValueError, match="valid_to_ns > valid_from_ns"):
        repo.upsert_calibration(
            writer_session, vendor_id=vendor_id, calibration_key="c5", robot_id="r1",
            valid_from_ns=10, valid_to_ns=10, cameras={},
        )  # fmt: skip


def test_record_streams_overwrites_per_topic(writer_session: Session, vendor_id: int) -> None:
    episode_id = _episode(writer_session, vendor_id, "s.mcap")
    streams = [
        repo.StreamStats(topic="/cam/front/h264", role=StreamRole.CAMERA, message_count=300, rate_hz=30.0),
        repo.StreamStats(topic="/robot/joint_states", role="state", message_count=2000, backward_steps=2),
    ]
    assert repo.record_streams(writer_session, episode_id, streams) == 2
    reread = [repo.StreamStats(topic="/cam/front/h264", role="camera", message_count=299, gap_rate=0.01)]
    assert repo.record_streams(writer_session, episode_id, reread) == 1
    rows = writer_session.execute(
        sa.select(Stream.topic, Stream.message_count, Stream.rate_hz, Stream.gap_rate).order_by(Stream.topic)
    ).all()
    assert [tuple(r) for r in rows] == [
        ("/cam/front/h264", 299, None, 0.01),
        ("/robot/joint_states", 2000, None, None),
    ]
    assert repo.record_streams(writer_session, episode_id, []) == 0
    with pytest.raises(UnknownChoiceError, match="stream role 'lidar'"):
        repo.record_streams(
            writer_session, episode_id, [repo.StreamStats(topic="/x", role="lidar", message_count=1)]
        )
