"""Hostile and careless vendor files are refused with every problem, its key path and what was allowed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pipeline.config import VendorConfig, load_vendor, load_vendors
from pipeline.errors import ConfigError


def problems_of(path: Path, **kwargs: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_vendor(path, **kwargs)  # type: ignore[arg-type]
    assert caught.value.source == str(path)
    return dict(caught.value.problems)


# --- unknown keys and enums ---------------------------------------------------------------------------------


def test_unknown_nested_key_is_named_with_its_path_and_the_allowed_keys(write_vendor, tiny: str) -> None:
    path = write_vendor(tiny + "steps:\n  transcode:\n    resources:\n      cpu: 2\n")
    problems = problems_of(path)
    assert list(problems) == ["steps.transcode.resources.cpu"]
    message = problems["steps.transcode.resources.cpu"]
    assert "unknown key 'cpu'" in message and "cpus" in message and "memory_bytes" in message
    assert "line 13" in message


def test_misspelled_step_lists_the_steps(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "steps:\n  transcoder: {enabled: false}\n"))
    assert "ingest, quality_pre, transcode, quality_post, annotate, shard" in problems["steps.transcoder"]


@pytest.mark.parametrize(
    ("extra", "key", "allowed"),
    [
        ("transcode:\n  profile: vlaa\n", "transcode.profile", ["vla", "world_model", "random_access"]),
        ("timestamps:\n  truth: gps\n", "timestamps.truth", ["hardware", "log_time", "publish_time"]),
        ("  compressions: [zstd, brotli]\n", "topics.compressions[1]", ["none", "lz4", "zstd"]),
        ("shard:\n  format: tar\n", "shard.format", ["webdataset"]),
    ],
)
def test_wrong_enum_value_lists_the_allowed_values(
    write_vendor, tiny: str, extra: str, key: str, allowed: list[str]
) -> None:
    problems = problems_of(write_vendor(tiny + extra))
    assert key in problems, problems
    assert all(f"'{word}'" in problems[key] for word in allowed)


def test_wrong_kind_lists_the_kinds(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny.replace("kind: mcap", "kind: rosbag")))
    assert "'rosbag' is not allowed" in problems["kind"] and "'mcap'" in problems["kind"]


def test_every_problem_is_reported_at_once(write_vendor, tiny: str) -> None:
    text = tiny + "transcode: {profile: fast}\nshard: {target_shard_bytes: lots}\nplanner: {max_splitz: 3}\n"
    problems = problems_of(write_vendor(text))
    assert {"transcode.profile", "shard.target_shard_bytes", "planner.max_splitz"} <= set(problems)


# --- YAML: anchors, aliases, tags, documents ----------------------------------------------------------------

BILLION_LAUGHS = "\n".join(
    ["name: tiny", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    + ["kind: *a9"]
)


@pytest.mark.timeout(20)
def test_alias_bomb_is_refused_before_expansion(write_vendor) -> None:
    path = write_vendor(BILLION_LAUGHS)
    started = time.perf_counter()
    problems = problems_of(path)
    elapsed_s = time.perf_counter() - started
    (message,) = problems.values()
    assert "anchors are not allowed" in message and "&a0" in message
    # Expanded, the bomb holds 10^10 strings: anything but an immediate refusal would take minutes.
    assert elapsed_s < 2.0


def test_a_single_alias_is_refused(write_vendor, tiny: str) -> None:
    text = tiny.replace("rate_hz: 200", "rate_hz: &r 200") + "  actions:\n    - {topic: /a, rate_hz: *r}\n"
    (message,) = problems_of(write_vendor(text)).values()
    assert "anchors are not allowed (found &r)" in message


def test_python_tags_are_never_constructed(write_vendor, tiny: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = tiny + f'description: !!python/object/apply:os.system ["touch {marker}"]\n'
    problems = problems_of(write_vendor(text))
    assert "YAML tags are not allowed" in problems["description"]
    assert not marker.exists()


@pytest.mark.parametrize("tagged", ["!!str mcap", "!custom mcap", "! mcap"])
def test_any_tag_is_refused_even_a_harmless_one(write_vendor, tiny: str, tagged: str) -> None:
    problems = problems_of(write_vendor(tiny.replace("kind: mcap", f"kind: {tagged}")))
    assert list(problems) == ["kind"]
    assert "YAML tags are not allowed" in problems["kind"]


def test_duplicate_keys_are_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "name: other\n"))
    assert "duplicate key 'name' (first at line 1)" in problems["name"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        ("- a\n- b\n", "the document is a list"),
        ("just text\n", "the document is a single value"),
        ("name: tiny\n---\nname: again\n", "one YAML document"),
        ("name: [unclosed\n", "not valid YAML"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than"),
        ("? [a, b]\n: c\n", "complex mapping keys"),
    ],
)
def test_unreadable_documents_are_refused(write_vendor, text: str, expected: str) -> None:
    problems = problems_of(write_vendor(text))
    assert any(expected in message for message in problems.values()), problems


def test_non_text_keys_are_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "annotate:\n  annotators:\n    1: {version: '1'}\n"))
    assert list(problems) == ["annotate.annotators.1"]
    assert "key '1' is read as int; keys must be text: quote it" in problems["annotate.annotators.1"]


# --- YAML 1.1 coercions on string and boolean fields --------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "reading"),
    [
        ("NO", "False"),
        ("on", "True"),
        ("yes", "True"),
        ("0123", "83"),
        ("1:30", "90"),
        ("2024-01-01", "date"),
    ],
)
def test_yaml11_surprises_on_string_fields_are_errors(
    write_vendor, tiny: str, written: str, reading: str
) -> None:
    problems = problems_of(write_vendor(tiny + f"owner: {written}\n"))
    assert list(problems) == ["owner"]
    assert f"ambiguous plain scalar {written!r}" in problems["owner"]
    assert reading in problems["owner"] and "quote it" in problems["owner"]


def test_a_float_looking_version_on_a_string_field_is_an_error(write_vendor, tiny: str) -> None:
    text = tiny + "annotate:\n  annotators:\n    motion_energy: {version: 1.10}\n"
    problems = problems_of(write_vendor(text))
    message = problems["annotate.annotators.motion_energy.version"]
    assert "expected a string, got the number 1.1" in message and "'1.10'" in message


@pytest.mark.parametrize("written", ["NO", "on", "0123", "1.10", "2024-01-01"])
def test_quoted_text_keeps_exactly_what_was_written(write_vendor, tiny: str, written: str) -> None:
    vendor = load_vendor(write_vendor(tiny + f"owner: '{written}'\ndescription: \"{written}\"\n"))
    assert vendor.owner == written and vendor.description == written


@pytest.mark.parametrize("written", ["yes", "on", "Y", "off"])
def test_yaml11_booleans_are_errors_on_boolean_fields(write_vendor, tiny: str, written: str) -> None:
    problems = problems_of(write_vendor(tiny + f"steps:\n  annotate:\n    enabled: {written}\n"))
    assert "write true or false" in problems["steps.annotate.enabled"]


@pytest.mark.parametrize(
    ("written", "expected"),
    [("'true'", "expected true or false, got the string 'true'"), ("1", "the integer 1")],
)
def test_booleans_must_be_booleans(write_vendor, tiny: str, written: str, expected: str) -> None:
    problems = problems_of(write_vendor(tiny + f"steps:\n  annotate:\n    enabled: {written}\n"))
    assert expected in problems["steps.annotate.enabled"]


@pytest.mark.parametrize(("written", "kind"), [("'2'", "the string '2'"), ("true", "the boolean true")])
def test_numbers_must_be_numbers(write_vendor, tiny: str, written: str, kind: str) -> None:
    problems = problems_of(write_vendor(tiny + f"steps:\n  shard:\n    resources: {{cpus: {written}}}\n"))
    assert f"expected a number, got {kind}" in problems["steps.shard.resources.cpus"]


def test_integers_refuse_fractions(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "transcode: {gop_frames: 10.5}\n"))
    assert "expected an integer" in problems["transcode.gop_frames"]


def test_infinity_is_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "timestamps: {max_clock_jump_s: .inf}\n"))
    assert "finite" in problems["timestamps.max_clock_jump_s"]


# --- paths confined to the vendor root ----------------------------------------------------------------------


def test_dotdot_escape_is_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "calibration: {sidecar_path: ../secrets.json}\n"))
    assert "'..'" in problems["calibration.sidecar_path"]


def test_dotdot_in_globs_is_refused(write_vendor, tiny: str) -> None:
    text = tiny.replace("source:\n", "source:\n  include: ['../other/**/*.mcap']\n")
    problems = problems_of(write_vendor(text))
    assert "'..'" in problems["source.include[0]"]


def test_absolute_path_outside_the_root_is_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "calibration: {sidecar_path: /etc/passwd}\n"))
    assert "outside the vendor root" in problems["calibration.sidecar_path"]


def test_absolute_path_inside_the_root_is_accepted(write_vendor, tiny: str, drop: Path) -> None:
    vendor = load_vendor(write_vendor(tiny + f"calibration: {{sidecar_path: {drop}/calibrations.json}}\n"))
    assert vendor.calibration.sidecar_path == f"{drop}/calibrations.json"


def test_symlink_out_of_the_root_is_refused(write_vendor, tiny: str, drop: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    (drop / "calibrations.json").symlink_to(secret)
    problems = problems_of(write_vendor(tiny + "calibration: {sidecar_path: calibrations.json}\n"))
    assert f"resolves to {secret}" in problems["calibration.sidecar_path"]


def test_symlinked_folder_out_of_the_root_is_refused(
    write_vendor, tiny: str, drop: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (drop / "meta").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    problems = problems_of(write_vendor(tiny + "calibration: {sidecar_path: meta/calibrations.json}\n"))
    assert "outside the vendor root" in problems["calibration.sidecar_path"]


def test_symlink_inside_the_root_is_accepted(write_vendor, tiny: str, drop: Path) -> None:
    (drop / "real.json").write_text("[]")
    (drop / "calibrations.json").symlink_to(drop / "real.json")
    vendor = load_vendor(write_vendor(tiny + "calibration: {sidecar_path: calibrations.json}\n"))
    assert vendor.calibration.sidecar_path == "calibrations.json"


def test_explicit_vendor_root_overrides_the_source_folder(write_vendor, tiny: str, tmp_path: Path) -> None:
    other_root = tmp_path / "other"
    other_root.mkdir()
    path = write_vendor(tiny + "calibration: {sidecar_path: calibrations.json}\n")
    load_vendor(path)  # inside the source folder
    (other_root / "calibrations.json").symlink_to(tmp_path / "drop" / "calibrations.json")
    problems = problems_of(path, vendor_root=other_root)
    assert "outside the vendor root" in problems["calibration.sidecar_path"]


def test_ready_marker_must_be_a_bare_name(write_vendor, tiny: str) -> None:
    text = tiny.replace("source:\n", "source:\n  ready_marker: sub/_READY\n")
    problems = problems_of(write_vendor(text))
    assert "bare file name" in problems["source.ready_marker"]


def test_remote_sources_refuse_absolute_paths(write_vendor, tiny: str) -> None:
    text = tiny.replace("url: {root}", "url: memory://bucket/acme") + "calibration: {sidecar_path: /etc/x}\n"
    problems = problems_of(write_vendor(text))
    assert "the source is remote" in problems["calibration.sidecar_path"]


def test_unknown_fsspec_protocol_is_named(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny.replace("url: {root}", "url: s4://bucket/acme")))
    assert "unknown fsspec protocol 's4'" in problems["source.url"] and "s3" in problems["source.url"]


# --- size, encoding, name -----------------------------------------------------------------------------------


def test_oversize_file_is_refused_before_reading(write_vendor, tiny: str) -> None:
    path = write_vendor(tiny + "description: '" + "x" * 300_000 + "'\n")
    problems = problems_of(path)
    assert "the limit is 262144 bytes" in problems[""]
    assert "limit is 100 bytes" in problems_of(write_vendor(tiny), max_bytes=100)[""]


def test_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "tiny.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in problems_of(fifo)[""]  # and does not block on the FIFO


def test_non_utf8_is_refused(write_vendor, tiny: str) -> None:
    path = write_vendor(tiny)
    path.write_bytes(path.read_bytes() + b"description: \xff\xfe\n")
    assert "not UTF-8" in problems_of(path)[""]


def test_name_must_match_the_file(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny, name="acme"))
    assert "must equal the file name's stem 'acme'" in problems["name"]


def test_a_vendor_file_may_not_take_the_ad_hoc_vendors_prefix(write_vendor, tiny: str) -> None:
    """The catalog tells ad-hoc ingests' vendors by their prefix: a configured vendor named so would be
    treated as one (its accepted files would make no other vendor's a duplicate)."""
    path = write_vendor(tiny.replace("name: tiny", "name: adhoc_tiny"), name="adhoc_tiny")
    assert "names the vendors of ad-hoc ingests" in problems_of(path)["name"]


def test_name_must_be_a_slug(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny.replace("name: tiny", "name: Tiny-Vendor"), name="Tiny-Vendor"))
    assert "is not a slug" in problems["name"]


# --- cross-field rules --------------------------------------------------------------------------------------


def test_unknown_pool_lists_the_declared_pools(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "steps:\n  annotate: {pool: tpu}\n"))
    assert "unknown pool 'tpu'; declared pools: cpu, db, gpu, io" in problems["steps.annotate.pool"]


def test_an_annotator_asking_for_a_gpu_needs_the_gpu_pool(write_vendor, tiny: str) -> None:
    caption = "annotate:\n  annotators:\n    caption: {version: '1', params: {model_path: /m, gpus: 1}}\n"
    problems = problems_of(write_vendor(tiny + caption))
    said = problems["annotate.annotators.caption.params.gpus"]
    assert "asks for 1 GPU(s) but steps.annotate runs on pool 'cpu'" in said and "pool: gpu" in said
    on_gpu = load_vendor(write_vendor(tiny + caption + "steps:\n  annotate: {pool: gpu}\n"))
    assert on_gpu.steps.annotate.celery_queue == "gpu"


def test_pool_slots_must_fit_the_pool(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "pools: {cpu: {slots: 1}}\n"))
    assert "2 slots never fit pool 'cpu' of 1 slots" in problems["steps.transcode.pool_slots"]


def test_random_access_needs_b_frames_between_anchors(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "transcode: {profile: random_access, bframes: 4}\n"))
    assert "bframes ≥ gop_frames - 1 = 16" in problems["transcode.bframes"]
    problems = problems_of(write_vendor(tiny + "transcode: {profile: vla, bframes: 2}\n"))
    assert "Foxglove" in problems["transcode.bframes"]
    # anchors at most 17 apart: 16 B-frames is what x264 and x265 allow between two
    problems = problems_of(write_vendor(tiny + "transcode: {profile: random_access, gop_frames: 18}\n"))
    assert "gop_frames ≤ 17" in problems["transcode.gop_frames"]


def test_h265_has_no_cavlc(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "transcode: {codec: h265, entropy_coder: cavlc}\n"))
    assert "h265 has only CABAC" in problems["transcode.entropy_coder"]


def test_crf_and_qp_are_exclusive(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "transcode: {crf: 20, qp: 20}\n"))
    assert "exactly one of crf and qp" in problems["transcode.crf"]


def test_kind_decides_the_contract(write_vendor, tiny: str) -> None:
    no_topics = "name: tiny\nkind: mcap\nsource: {url: {root}}\n"
    assert "kind mcap needs a topic contract" in problems_of(write_vendor(no_topics))["topics"]
    video_with_topics = tiny.replace("kind: mcap", "kind: video")
    assert "for kind mcap only" in problems_of(write_vendor(video_with_topics))["topics"]


def test_duplicate_topics_are_refused(write_vendor, tiny: str) -> None:
    text = tiny + "  actions:\n    - {topic: /robot/joint_states, rate_hz: 50, message_encodings: [json]}\n"
    problems = problems_of(write_vendor(text))
    assert "already listed at state[0].topic" in problems["topics.actions[0].topic"]


def test_bad_cron_is_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "schedule: {cron: '61 * * * *'}\n"))
    assert "not a 5-field cron expression" in problems["schedule.cron"]


# --- many files ---------------------------------------------------------------------------------------------


def test_one_broken_file_does_not_break_the_others(write_vendor, tiny: str) -> None:
    good = write_vendor(tiny)
    write_vendor(tiny.replace("name: tiny", "name: broken") + "bogus: 1\n", name="broken")
    write_vendor(BILLION_LAUGHS.replace("name: tiny", "name: bomb"), name="bomb")
    (good.parent / "notes.txt").write_text("not a vendor")
    loaded = load_vendors(good.parent)
    assert set(loaded) == {"tiny", "broken", "bomb"}
    assert isinstance(loaded["tiny"], VendorConfig)
    assert isinstance(loaded["broken"], ConfigError) and "bogus" in str(loaded["broken"])
    assert isinstance(loaded["bomb"], ConfigError)


def test_two_files_for_one_vendor_are_both_refused(write_vendor, tiny: str) -> None:
    path = write_vendor(tiny)
    path.with_suffix(".yml").write_text(path.read_text())
    loaded = load_vendors(path.parent)
    assert isinstance(loaded["tiny"], ConfigError) and "several files" in str(loaded["tiny"])


def test_duration_bounds_must_leave_room_for_an_input(write_vendor, tiny: str) -> None:
    # min above max used to load, and the pre-gate's duration check then passed every input.
    problems = problems_of(write_vendor(tiny + "quality: {pre: {min_duration_s: 10, max_duration_s: 5}}\n"))
    assert "min_duration_s 10 is above max_duration_s 5" in problems["quality.pre"]


def test_video_probe_limits_follow_the_vendor_thresholds(write_vendor, tiny: str) -> None:
    from pipeline.quality.video import probe_limits

    text = tiny + "quality: {pre: {vfr_tolerance_fraction: 0.35, blank_luma_stddev_max: 2.5}}\n"
    limits = probe_limits(load_vendor(write_vendor(text)))
    assert (limits.vfr_tolerance, limits.blank_luma_std_max) == (0.35, 2.5)


def test_a_queue_no_worker_serves_is_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny + "steps: {annotate: {queue: tpu}}\n"))
    assert (
        "no worker serves queue 'tpu'; served queues: default, cpu, io, db, gpu"
        in problems["steps.annotate.queue"]
    )


def test_a_step_on_a_vendors_own_pool_runs_on_the_default_queue(write_vendor, tiny: str) -> None:
    text = (
        tiny
        + "pools: {bulk_io: {slots: 8}}\nsteps: {ingest: {pool: bulk_io}, shard: {pool: bulk_io, queue: io}}\n"
    )
    steps = load_vendor(write_vendor(text)).steps
    assert (steps.ingest.pool, steps.ingest.celery_queue) == ("bulk_io", "default")
    assert steps.shard.celery_queue == "io"
    assert steps.transcode.celery_queue == "cpu"


# --- secrets ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "paths"),
    [
        ("{key: AKIAEXAMPLE, secret: wJalrXUtnFEMI}", ["storage_options.key", "storage_options.secret"]),
        (
            "{client_kwargs: {aws_secret_access_key: x}}",
            ["storage_options.client_kwargs.aws_secret_access_key"],
        ),
        ("{account_name: acct, Account-Key: x}", ["storage_options.Account-Key"]),
        ("{headers: {Authorization: Bearer abc}}", ["storage_options.headers.Authorization"]),
        ("{token: {refresh_token: x, client_secret: y}}", ["storage_options.token"]),
    ],
)
def test_inline_credentials_in_storage_options_are_refused(
    write_vendor, tiny: str, options: str, paths: list[str]
) -> None:
    text = tiny.replace("  url: {root}\n", f"  url: {{root}}\n  storage_options: {options}\n")
    problems = problems_of(write_vendor(text))
    message = problems["source.storage_options"]
    assert all(p in message for p in paths), message
    assert "environment" in message and "curation role" in message


def test_credential_free_storage_options_and_token_methods_pass(write_vendor, tiny: str) -> None:
    text = tiny.replace(
        "  url: {root}\n",
        "  url: {root}\n  storage_options: {anon: false, token: google_default, key_prefix: a}\n",
    )
    assert load_vendor(write_vendor(text)).source.storage_options["token"] == "google_default"


def test_a_password_in_the_source_url_is_refused(write_vendor, tiny: str) -> None:
    problems = problems_of(write_vendor(tiny.replace("url: {root}", "url: sftp://vendor:hunter2@host/drop")))
    assert "password" in problems["source.url"]
