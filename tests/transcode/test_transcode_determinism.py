"""Every encoder gives the same bytes however the process's heap was used before (pipeline.media.x264).

libx264 with B-frames and its macroblock tree reads memory it never wrote; the bytes it finds there are
whatever earlier allocations left. glibc's ``MALLOC_PERTURB_`` fills freed and new heap memory with a
chosen byte, so running the same encodes in processes with two different fill bytes shows any output that
depends on such memory (before ``mbtree=0``, random_access under CRF and the synthetic vendor clips did).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import transcode_helpers
    from transcode_helpers import PROVENANCE, config_for, write_source
    from pipeline.synth.video import ClipMedia, ClipSpec, write_clip
    from pipeline.transcode import transcode_episode

    out = Path(sys.argv[2])
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
    # larger than the helpers' 128x96: the stale reads showed at 224x176, not at every size
    transcode_helpers.WIDTH, transcode_helpers.HEIGHT = 224, 176
    source = write_source(out / "source.mcap", seconds=1.0)
    clip = out / "clip.mp4"
    write_clip(clip, ClipSpec("c", "clip.mp4", 2.0, seed=3, scene_cuts=1), ClipMedia())
    found = {"source": digest(source), "vendor_clip": digest(clip)}
    for name, options in {
        "vla": {},
        "random_access": {},
        "random_access_crf": {"qp": None, "crf": 23},
        "vla_h265": {"codec": "h265"},
        "random_access_h265_crf": {"codec": "h265", "qp": None, "crf": 23},
    }.items():
        profile = name.removesuffix("_crf").removesuffix("_h265")
        result = transcode_episode(
            source, out / name / "episode.mcap", config_for(profile, **options), PROVENANCE
        )
        found[name] = result.sha256
    print(json.dumps(found))
    """
)


def _encode_all(tmp: Path, fill: int) -> dict[str, str]:
    out = tmp / f"fill{fill}"
    out.mkdir()
    env = {**os.environ, "MALLOC_PERTURB_": str(fill)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(HERE), str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MALLOC_PERTURB_ is glibc's")
def test_encodes_do_not_depend_on_what_the_heap_held(tmp_path: Path) -> None:
    first, second = _encode_all(tmp_path, 85), _encode_all(tmp_path, 170)
    assert set(first) == {
        "source",
        "vendor_clip",
        "vla",
        "random_access",
        "random_access_crf",
        "vla_h265",
        "random_access_h265_crf",
    }
    differing = sorted(k for k in first if first[k] != second[k])
    assert differing == []


def test_a_reused_encoder_pool_gives_the_same_bytes_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transcode step keeps one encoder pool for all its episodes: the same episode encoded again and
    again in the same child processes, with other episodes (other sizes, other content) in between, must
    come out byte-identical each time (with x264's macroblock tree on, 2 encodes in 16 of a vla episode gave
    a different camera stream; with it on, this test failed in 10 of 12 runs)."""
    import transcode_helpers
    from transcode_helpers import PROVENANCE, config_for, write_source

    from pipeline.processes import WorkerPool
    from pipeline.transcode import transcode_episode

    monkeypatch.setattr(transcode_helpers, "WIDTH", 224)
    monkeypatch.setattr(transcode_helpers, "HEIGHT", 176)
    source = write_source(tmp_path / "source.mcap", seconds=1.0)
    monkeypatch.setattr(transcode_helpers, "WIDTH", 160)
    monkeypatch.setattr(transcode_helpers, "HEIGHT", 128)
    other = write_source(tmp_path / "other.mcap", seconds=1.0, seed=11)
    config = config_for("vla")
    digests = []
    with WorkerPool(1, name="transcode encoder") as pool:
        for i in range(32):
            result = transcode_episode(
                source,
                tmp_path / f"run{i}" / "episode.mcap",
                config,
                PROVENANCE,
                executor=pool,
                executor_workers=1,
            )
            digests.append(result.sha256)
            transcode_episode(
                other,
                tmp_path / f"other{i}" / "episode.mcap",
                config,
                PROVENANCE,
                executor=pool,
                executor_workers=1,
            )
    assert digests == [digests[0]] * len(digests)
