"""`sluice vendor validate | show | hash | schema | init`: exit codes and what they print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.vendor import app
from pipeline.config import config_hash, load_vendor

runner = CliRunner()


def test_validate_good_files_exits_0_with_a_summary_and_the_hash(vendors_dir: Path) -> None:
    files = [vendors_dir / "acme_robotics.yaml", vendors_dir / "northwind_video.yaml"]
    result = runner.invoke(app, ["validate", *map(str, files)])
    assert result.exit_code == 0, result.output
    for file in files:
        (line,) = [line for line in result.output.splitlines() if str(file) in line]
        assert line.startswith("ok ") and config_hash(load_vendor(file)) in line


def test_validate_a_folder(vendors_dir: Path) -> None:
    result = runner.invoke(app, ["validate", str(vendors_dir)])
    assert result.exit_code == 0, result.output
    assert "acme_robotics (mcap)" in result.output and "northwind_video (video)" in result.output


def test_validate_bad_file_exits_1_and_prints_every_problem_with_its_key_path(
    write_vendor, tiny: str
) -> None:
    bad = write_vendor(tiny + "owner: NO\nsteps:\n  transcode:\n    resources: {cpu: 2}\n", name="tiny")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"invalid {bad}: 2 problem(s)" in result.output
    assert "  owner  line 10: ambiguous plain scalar 'NO'" in result.output
    assert "  steps.transcode.resources.cpu  line 13: unknown key 'cpu'" in result.output


def test_validate_mixed_files_exits_1_but_reports_the_good_one(
    vendors_dir: Path, write_vendor, tiny: str
) -> None:
    bad = write_vendor(tiny + "kind: video\n")
    result = runner.invoke(app, ["validate", str(vendors_dir / "acme_robotics.yaml"), str(bad)])
    assert result.exit_code == 1
    assert "ok acme_robotics" in result.output and "duplicate key 'kind'" in result.output
    assert "1 of 2 vendor file(s) invalid" in result.output


def test_validate_warns_about_a_local_source_folder_that_is_not_there(
    write_vendor, tiny: str, drop: Path
) -> None:
    good = write_vendor(tiny)
    result = runner.invoke(app, ["validate", str(good)])
    assert result.exit_code == 0 and "warning" not in result.output
    typo = write_vendor(tiny.replace("{root}", "{root}_typo"), name="tiny")
    result = runner.invoke(app, ["validate", str(typo)])
    # Valid (the folder may be a worker's mount), but a run here would fail: say so.
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if line.startswith("  warning ")]
    assert f"source.url  {drop}_typo does not exist here" in warning and "source_missing" in warning
    assert "1 vendor file(s) valid but with warnings" in result.output


def test_validate_warns_about_a_source_that_gives_a_run_nothing_to_do(
    write_vendor, tiny: str, drop: Path
) -> None:
    """An empty folder, or globs that select none of its files: valid, but a run would warn that it had
    nothing to do (it printed "ok" alone)."""
    (drop / "e000.mcap").unlink()
    (drop / "notes.bag").write_bytes(b"")
    result = runner.invoke(app, ["validate", str(write_vendor(tiny))])
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if line.startswith("  warning ")]
    assert f"nothing_selected: 1 file(s) under {drop}, but the source's include/exclude globs" in warning
    (drop / "notes.bag").unlink()
    result = runner.invoke(app, ["validate", str(write_vendor(tiny))])
    assert f"source_empty: no files under {drop}: a run now would have nothing to do" in result.output


def test_validate_warns_about_an_annotator_nobody_registered(write_vendor, tiny: str) -> None:
    typo = write_vendor(
        tiny
        + "annotate:\n  annotators:\n    motion_enrgy: {enabled: true, version: '1'}\n    image_stats: {enabled: true, version: '1'}\n",
        name="tiny",
    )
    result = runner.invoke(app, ["validate", str(typo)])
    assert result.exit_code == 0, (
        result.output
    )  # valid: a deployment may register its own before annotate runs
    (warning,) = [line for line in result.output.splitlines() if line.startswith("  warning ")]
    assert "annotate.annotators.motion_enrgy  not a registered annotator" in warning
    assert "did you mean 'motion_energy'?" in warning
    assert "1 vendor file(s) valid but with warnings" in result.output
    from pipeline.annotate import register_annotator, unregister_annotator

    register_annotator("motion_enrgy", "pipeline.annotate.video:MotionEnergy")
    try:
        assert "warning" not in runner.invoke(app, ["validate", str(typo)]).output
    finally:
        unregister_annotator("motion_enrgy")


def test_validate_warns_about_a_vendor_whose_every_step_is_off(write_vendor, tiny: str) -> None:
    steps = "".join(
        f"  {step}: {{enabled: false}}\n"
        for step in ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")
    )
    idle = write_vendor(tiny + "steps:\n" + steps, name="tiny")
    result = runner.invoke(app, ["validate", str(idle)])
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if line.startswith("  warning ")]
    assert "steps  every step is off" in warning


def test_validate_missing_file_exits_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 1 and "cannot read the file" in result.output


def test_show_prints_the_resolved_config_with_defaults(vendors_dir: Path) -> None:
    file = vendors_dir / "acme_robotics.yaml"
    result = runner.invoke(app, ["show", str(file)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown == load_vendor(file).model_dump(mode="json")
    # Defaults the file never mentions are there.
    assert shown["steps"]["quality_post"]["critical"] is True
    assert shown["ingest"]["max_record_bytes"] == 64 * 2**20


def test_show_bad_file_exits_1(write_vendor, tiny: str) -> None:
    result = runner.invoke(app, ["show", str(write_vendor(tiny + "bogus: 1\n"))])
    assert result.exit_code == 1 and "unknown key 'bogus'" in result.output


def test_hash_prints_config_and_step_hashes(vendors_dir: Path) -> None:
    result = runner.invoke(app, ["hash", str(vendors_dir / "northwind_video.yaml")])
    assert result.exit_code == 0, result.output
    hashes = json.loads(result.output)
    assert hashes["config_hash"] == config_hash(load_vendor(vendors_dir / "northwind_video.yaml"))
    assert set(hashes["steps"]) == {"ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard"}


def test_schema_describes_the_resolved_examples(vendors_dir: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["additionalProperties"] is False
    assert {"name", "kind", "source", "steps"} <= set(schema["properties"])
    for name in ("acme_robotics", "northwind_video"):
        jsonschema.validate(load_vendor(vendors_dir / f"{name}.yaml").model_dump(mode="json"), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "kind": "mcap", "source": {"url": "d"}, "bogus": 1}, schema)


@pytest.mark.parametrize("value", [".nan", ".NaN", "-.inf", "+.Inf"])
def test_validate_names_a_nan_or_infinite_threshold_as_a_problem(write_vendor, tiny: str, value: str) -> None:
    bad = write_vendor(tiny + f"quality:\n  pre:\n    max_gap_rate: {value}\n")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "quality.pre.max_gap_rate  line 12: input should be a finite number" in result.output


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short robot log to propose a vendor file from."""
    from pipeline.synth import RobotDropConfig, make_robot_drop

    drop = tmp_path_factory.mktemp("sample") / "drop"
    config = RobotDropConfig(episodes=1, seconds=0.5, width=64, height=48)
    return drop / make_robot_drop(drop, config).files[0].path


def test_init_out_that_cannot_be_written_is_one_error_naming_it(tmp_path: Path, sample: Path) -> None:
    from pipeline.config.propose import ProposeError

    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    args = ["init", "x", "--from", str(sample), "--source", str(tmp_path / "drop"), "--out"]
    result = runner.invoke(app, [*args, str(afile / "x.yaml")])
    assert isinstance(result.exception, ProposeError), result.exception
    assert str(result.exception) == (
        f"cannot write the vendor file {afile / 'x.yaml'}: {afile} is a file, not a directory"
    )
    folder = tmp_path / "x.yaml"
    folder.mkdir()
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [*args, str(folder), "--force"])  # unfolded
    assert result.exit_code == 2 and f"--out {folder} is a directory" in result.output, result.output
    if Path("/proc").is_dir():
        result = runner.invoke(app, [*args, "/proc/x.yaml"])
        assert isinstance(result.exception, ProposeError), result.exception
        assert "cannot write the vendor file /proc/x.yaml: the filesystem of /proc refused it" in str(
            result.exception
        )
    result = runner.invoke(app, [*args, str(tmp_path / "new" / "x.yaml")])
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["x.yaml"]  # no scratch folder left


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("s3://", "'s3://' names no bucket or host: write s3://BUCKET/PREFIX"),
        ("s3:/drops/acme", "'s3:/drops/acme' is not a URL: write s3://drops/acme"),
    ],
)
def test_validate_refuses_a_source_url_written_wrong(write_vendor, tiny: str, url: str, said: str) -> None:
    """`s3://` passed validation, then discovery stopped with s3fs's "Cannot traverse all of S3"; `s3:/x`
    was taken for a local folder named `s3:` and only warned about as missing."""
    bad = write_vendor(tiny.replace("{root}", url), name="tiny")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1, result.output
    assert said in " ".join(result.output.split()), result.output
