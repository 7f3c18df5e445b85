-- Curation views of the warehouse (DuckDB), over the copies of the catalog tables in schema `catalog`.
--
-- Every sync runs this file in the same transaction as the copy (CREATE OR REPLACE), so an edit here reaches
-- the warehouse on the next `sluice dataset sync`. Dataset specs filter `episode_view`; the smaller views
-- are its parts and can be queried on their own. Only DuckDB SQL: nothing here reads a file.
--
-- "Latest" means the most recently written row (then the highest id), so a re-run under a new config or a
-- new annotator version replaces the old values in these views while the old rows stay in `catalog`.

-- Per-topic statistics of an episode, aggregated to one row per episode.
CREATE OR REPLACE VIEW stream_stats AS
SELECT
    episode_id,
    count(*) AS n_streams,
    count(*) FILTER (WHERE role = 'camera') AS n_camera_streams,
    sum(message_count)::BIGINT AS message_count,
    min(rate_hz) FILTER (WHERE role = 'camera') AS camera_rate_hz_min,
    min(rate_hz) FILTER (WHERE role = 'state') AS state_rate_hz_min,
    max(gap_rate) AS gap_rate_max,
    avg(gap_rate) AS gap_rate_mean,
    sum(backward_steps)::BIGINT AS backward_steps,
    sum(duplicate_timestamps)::BIGINT AS duplicate_timestamps,
    max(max_jump_ns) AS max_jump_ns,
    max(abs(skew_median_ns)) AS skew_median_abs_max_ns,
    max(abs(skew_p99_ns)) AS skew_p99_abs_max_ns,
    max(abs(skew_max_ns)) AS skew_abs_max_ns,
    list(topic ORDER BY topic) AS topics
FROM catalog.streams
GROUP BY episode_id;

-- The latest result of each gate check on each episode (a re-check under a new config supersedes).
CREATE OR REPLACE VIEW latest_checks AS
SELECT *
FROM catalog.check_results
QUALIFY row_number() OVER (PARTITION BY episode_id, gate, check_name ORDER BY checked_at DESC, id DESC) = 1;

-- Gate outcomes per episode: counts and the worst status of each gate.
CREATE OR REPLACE VIEW check_stats AS
SELECT
    episode_id,
    count(*) AS n_checks,
    count(*) FILTER (WHERE status = 'failed') AS n_checks_failed,
    count(*) FILTER (WHERE status = 'warned') AS n_checks_warned,
    ['passed', 'warned', 'failed'][
        max(CASE status WHEN 'failed' THEN 3 WHEN 'warned' THEN 2 ELSE 1 END) FILTER (WHERE gate = 'quality_pre')
    ] AS pre_gate_status,
    ['passed', 'warned', 'failed'][
        max(CASE status WHEN 'failed' THEN 3 WHEN 'warned' THEN 2 ELSE 1 END) FILTER (WHERE gate = 'quality_post')
    ] AS post_gate_status,
    coalesce(list(DISTINCT check_name ORDER BY check_name) FILTER (WHERE status = 'failed'), []) AS failed_checks
FROM latest_checks
GROUP BY episode_id;

-- The latest value of each annotation key on each episode, whichever annotator or version wrote it.
CREATE OR REPLACE VIEW annotation_values AS
SELECT episode_id, key, value, annotator, annotator_version, artifact_id, updated_at
FROM catalog.annotations
QUALIFY row_number() OVER (PARTITION BY episode_id, key ORDER BY updated_at DESC, id DESC) = 1;

-- Annotations per episode: all keys as one JSON object, the quality rank, and the five quality scores of
-- the manifest as numbers (an annotator records them under these keys, in [0, 1]; NULL when not recorded or not a number).
CREATE OR REPLACE VIEW annotation_stats AS
SELECT
    episode_id,
    count(*) AS n_annotation_keys,
    json_group_object(key, value) AS annotations,
    max(TRY_CAST(value::VARCHAR AS DOUBLE)) FILTER (WHERE key = 'quality_sync') AS quality_sync,
    max(TRY_CAST(value::VARCHAR AS DOUBLE)) FILTER (WHERE key = 'quality_completeness') AS quality_completeness,
    max(TRY_CAST(value::VARCHAR AS DOUBLE)) FILTER (WHERE key = 'quality_visual') AS quality_visual,
    max(TRY_CAST(value::VARCHAR AS DOUBLE)) FILTER (WHERE key = 'quality_motion') AS quality_motion,
    max(TRY_CAST(value::VARCHAR AS DOUBLE)) FILTER (WHERE key = 'quality_transcode') AS quality_transcode,
    -- The rank `annotate.rank` gave (pipeline.config.scoring), and the cascade stage that stopped the
    -- episode (NULL when every stage ran).
    max(value ->> '$') FILTER (WHERE key = 'quality_rank') AS quality_rank,
    max(value ->> '$') FILTER (WHERE key = 'annotate.stopped_at') AS cascade_stopped_at
FROM annotation_values
GROUP BY episode_id;

-- Near-duplicate groups (pipeline.dedup): per episode, the three `dedup.*` keys of its latest dedup run
-- (the annotator version it was most recently written under), so a re-run under new thresholds replaces all
-- three together instead of mixing runs. `representative` is the episode a dataset keeps by default.
CREATE OR REPLACE VIEW dedup_groups AS
WITH dedup AS (
    SELECT *
    FROM catalog.annotations
    WHERE annotator = 'dedup' AND key IN ('dedup.group', 'dedup.group_size', 'dedup.representative')
), latest_run AS (
    SELECT episode_id, annotator_version
    FROM dedup
    QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY updated_at DESC, id DESC) = 1
)
SELECT
    d.episode_id,
    d.annotator_version AS dedup_version,
    max(d.value ->> '$') FILTER (WHERE d.key = 'dedup.group') AS dedup_group,
    max(TRY_CAST(d.value ->> '$' AS BIGINT)) FILTER (WHERE d.key = 'dedup.group_size') AS dedup_group_size,
    max(TRY_CAST(d.value ->> '$' AS BIGINT)) FILTER (WHERE d.key = 'dedup.representative') AS representative
FROM dedup AS d
JOIN latest_run AS r USING (episode_id, annotator_version)
GROUP BY d.episode_id, d.annotator_version;

-- The clips a video episode's latest transcode wrote (pipeline.transcode.clips): one row per `clip`
-- artifact made under the config hash of the episode's most recently recorded clip, so a re-transcode under
-- a new config replaces the whole set while the old clips stay in `catalog.artifacts`. The transcode writes
-- `clip_<NNN>.mp4` and lists them, with their place in the source video, in `clips.json` beside them
-- (`clips_uri`); the dataset builder reads that list for the clips' time windows.
CREATE OR REPLACE VIEW episode_clips AS
WITH clips AS (
    SELECT *
    FROM catalog.artifacts
    WHERE kind = 'clip' AND episode_id IS NOT NULL
), latest AS (
    SELECT episode_id, config_hash
    FROM clips
    QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY created_at DESC, id DESC) = 1
)
SELECT
    c.episode_id,
    c.id AS clip_artifact_id,
    TRY_CAST(regexp_extract(c.uri, 'clip_([0-9]+)\.[A-Za-z0-9]+$', 1) AS INTEGER) AS clip_index,
    regexp_extract(c.uri, '[^/]+$') AS clip_file,
    c.uri AS clip_uri,
    c.sha256 AS clip_sha256,
    c.size_bytes AS clip_size_bytes,
    regexp_replace(c.uri, '[^/]+$', 'clips.json') AS clips_uri,
    c.config_hash AS transcode_config_hash,
    c.code_version AS transcode_code_version,
    c.created_at
FROM clips AS c
JOIN latest AS l USING (episode_id, config_hash);

-- Lineage per episode: what a manifest points at and all its artifacts. A robot episode's latest
-- `transcoded_episode` artifact (transcoded_*), or a video episode's latest set of clips (n_clips, clips_uri);
-- transcode_config_hash is the config of whichever of the two the episode has.
CREATE OR REPLACE VIEW episode_lineage AS
WITH transcoded AS (
    SELECT *
    FROM catalog.artifacts
    WHERE kind = 'transcoded_episode' AND episode_id IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY created_at DESC, id DESC) = 1
), clip_sets AS (
    SELECT episode_id, count(*) AS n_clips, min(clips_uri) AS clips_uri,
           min(transcode_config_hash) AS transcode_config_hash, min(transcode_code_version) AS transcode_code_version
    FROM episode_clips
    GROUP BY episode_id
), counted AS (
    SELECT episode_id, count(*) AS n_artifacts, list(id ORDER BY id) AS artifact_ids
    FROM catalog.artifacts
    WHERE episode_id IS NOT NULL
    GROUP BY episode_id
)
SELECT
    c.episode_id,
    c.n_artifacts,
    c.artifact_ids,
    t.id AS transcoded_artifact_id,
    t.uri AS transcoded_uri,
    t.sha256 AS transcoded_sha256,
    t.size_bytes AS transcoded_size_bytes,
    coalesce(k.n_clips, 0) AS n_clips,
    k.clips_uri,
    coalesce(t.config_hash, k.transcode_config_hash) AS transcode_config_hash,
    coalesce(t.code_version, k.transcode_code_version) AS transcode_code_version
FROM counted AS c
LEFT JOIN transcoded AS t USING (episode_id)
LEFT JOIN clip_sets AS k USING (episode_id);

-- One row per episode with everything curation filters on. Times: *_ns are log times (MCAP nanoseconds);
-- start_time_utc is the same instant as a UTC timestamp, for time-window queries. content_fingerprint is
-- what ingest's near-duplicate check compares: dataset splits can group on it. dedup_group / representative
-- are the near-duplicate grouping across episodes and vendors (NULL when the episode was never grouped).
CREATE OR REPLACE VIEW episode_view AS
SELECT
    e.id AS episode_id,
    v.name AS vendor,
    e.vendor_id,
    e.kind,
    e.robot_id,
    e.session_id,
    e.episode_key,
    e.task,
    e.content_fingerprint,
    e.start_time_ns,
    e.end_time_ns,
    e.duration_s,
    make_timestamp(e.start_time_ns // 1000) AS start_time_utc,
    e.state,
    e.reasons,
    len(e.reasons) AS n_reasons,
    e.state IN ('accepted', 'accepted_with_flags') AS is_accepted,
    e.detail,
    e.duplicate_of_id,
    dg.dedup_group,
    dg.dedup_group_size,
    dg.representative,
    dg.dedup_version,
    cal.calibration_key,
    e.calibration_id IS NOT NULL AS has_calibration,
    e.created_at,
    e.updated_at,
    sf.path AS source_path,
    e.blob_id,
    b.sha256 AS source_sha256,
    b.size_bytes AS source_size_bytes,
    b.raw_uri,
    coalesce(s.n_streams, 0) AS n_streams,
    coalesce(s.n_camera_streams, 0) AS n_camera_streams,
    coalesce(s.message_count, 0) AS message_count,
    s.camera_rate_hz_min,
    s.state_rate_hz_min,
    s.gap_rate_max,
    s.gap_rate_mean,
    coalesce(s.backward_steps, 0) AS backward_steps,
    coalesce(s.duplicate_timestamps, 0) AS duplicate_timestamps,
    s.max_jump_ns,
    s.skew_median_abs_max_ns,
    s.skew_p99_abs_max_ns,
    s.skew_abs_max_ns,
    coalesce(s.topics, []) AS topics,
    coalesce(c.n_checks, 0) AS n_checks,
    coalesce(c.n_checks_failed, 0) AS n_checks_failed,
    coalesce(c.n_checks_warned, 0) AS n_checks_warned,
    c.pre_gate_status,
    c.post_gate_status,
    coalesce(c.failed_checks, []) AS failed_checks,
    coalesce(a.n_annotation_keys, 0) AS n_annotation_keys,
    a.annotations,
    a.quality_sync,
    a.quality_completeness,
    a.quality_visual,
    a.quality_motion,
    a.quality_transcode,
    a.quality_rank,
    a.cascade_stopped_at,
    coalesce(l.n_artifacts, 0) AS n_artifacts,
    l.transcoded_artifact_id,
    l.transcoded_uri,
    l.transcoded_sha256,
    l.transcoded_size_bytes,
    coalesce(l.n_clips, 0) AS n_clips,
    l.clips_uri,
    l.transcode_config_hash
FROM catalog.episodes AS e
JOIN catalog.vendors AS v ON v.id = e.vendor_id
JOIN catalog.blobs AS b ON b.id = e.blob_id
LEFT JOIN catalog.source_files AS sf ON sf.id = e.source_file_id
LEFT JOIN catalog.calibrations AS cal ON cal.id = e.calibration_id
LEFT JOIN stream_stats AS s ON s.episode_id = e.id
LEFT JOIN check_stats AS c ON c.episode_id = e.id
LEFT JOIN annotation_stats AS a ON a.episode_id = e.id
LEFT JOIN dedup_groups AS dg ON dg.episode_id = e.id
LEFT JOIN episode_lineage AS l ON l.episode_id = e.id;
