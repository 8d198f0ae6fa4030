//! The amd-smi reader: detects the version once, reads the identity (`list`, `static`,
//! `partition`) at start and after a change, and `metric` + `process` where it is read every
//! tick, concurrently. Beside the kernel its reads run in the background on their own cadence
//! (`lane`). A failed or late read keeps the last good values (their timestamps age) and marks
//! that source stale with the error. One of the sources of `collect::pipeline`.

use super::assemble::{StaticData, assemble};
use super::error::AmdSmiError;
use super::json::{Extras, parse_gpu_array, parse_object, split_output};
use super::lane::{Lane, LaneOut, Policy, Role};
use super::recording::{CommandSource, Recording};
use super::runner::RawOutput;
use super::schema::{
    ListEntry, MetricEntry, PartitionDoc, PerGpuPartitionRow, ProcessEntry, StaticEntry,
};
use super::version::{AmdSmiVersion, Family};
use crate::collect::clock;
use crate::domain::snapshot::{Health, SCHEMA, Snapshot, SourceStatus};
use std::time::Duration;

/// Source names as shown in the header and the JSON.
pub const SRC_STATIC: &str = "amd-smi static";

/// The identity read's error while its first call runs.
pub const FIRST_READ_RUNNING: &str =
    "amd-smi's first read is running; identity and profiles follow";

/// The identity read's error before its first call.
pub const NOT_READ_YET: &str = "not read yet";

/// amd-smi's identity read (UUIDs, the firmware's names) has not answered yet: it has neither
/// succeeded nor failed. A failure or a timeout is an answer.
pub fn identity_pending(s: &SourceStatus) -> bool {
    s.name == SRC_STATIC
        && s.last_ok_ms.is_none()
        && s.error
            .as_deref()
            .is_none_or(|e| e == FIRST_READ_RUNNING || e == NOT_READ_YET)
}

/// Metrics source.
pub const SRC_METRIC: &str = "amd-smi metric";
/// Processes source.
pub const SRC_PROCESS: &str = "amd-smi process";

/// What amd-smi has told so far, and how it is asked.
#[derive(Debug)]
pub struct AmdSmi {
    source: CommandSource,
    recording: Option<Recording>,
    version: Option<AmdSmiVersion>,
    version_tried: bool,
    statics: Option<StaticData>,
    metric: Option<(Vec<MetricEntry>, u64)>,
    process: Option<(Vec<ProcessEntry>, u64)>,
    status: Vec<SourceStatus>,
    /// `list` and `metric` disagreed: re-read the layout at the next read.
    reread_static: bool,
    /// How amd-smi may be used beside the kernel, or alone.
    pub policy: Policy,
    lane: Lane,
    /// The last identity read, assembled once per read (kernel first merges it each tick).
    identity: Option<Snapshot>,
}

impl AmdSmi {
    /// A reader of `source` (the tool, or a recording).
    pub fn new(source: CommandSource) -> Self {
        Self {
            source,
            recording: None,
            version: None,
            version_tried: false,
            statics: None,
            metric: None,
            process: None,
            status: [SRC_STATIC, SRC_METRIC, SRC_PROCESS]
                .map(|n| SourceStatus::pending(n, None))
                .to_vec(),
            reread_static: false,
            policy: Policy::default(),
            lane: Lane::default(),
            identity: None,
        }
    }

    /// Where its output comes from.
    pub const fn source(&self) -> &CommandSource {
        &self.source
    }

    /// The detected version.
    pub const fn version(&self) -> Option<&AmdSmiVersion> {
        self.version.as_ref()
    }

    /// Starts keeping every output read, for `partop record`.
    pub fn start_recording(&mut self, host: String) {
        self.recording = Some(Recording::new(host));
    }

    /// The recording being made, if any.
    pub const fn recording_mut(&mut self) -> Option<&mut Recording> {
        self.recording.as_mut()
    }

    /// The outputs recorded so far.
    pub fn take_recording(&mut self) -> Option<Recording> {
        self.recording.take()
    }

    async fn call(&self, args: &[&str]) -> Result<RawOutput, AmdSmiError> {
        self.source.call(args).await
    }

    fn keep(&mut self, args: &[&str], out: &Result<RawOutput, AmdSmiError>) {
        if let (Some(rec), Ok(o)) = (self.recording.as_mut(), out) {
            rec.insert(args, o);
        }
    }

    /// The identity is read again at the next chance (after a change partop made, or a
    /// topology generation change).
    pub fn invalidate(&mut self) {
        self.statics = None;
        self.lane.force = true;
    }

    /// The topology moved: ask again at the next chance, keeping what is known meanwhile.
    pub const fn force(&mut self) {
        self.lane.force = true;
    }

    fn mark(&mut self, name: &str, r: Result<u64, &AmdSmiError>) {
        let version = self.version.as_ref().map(AmdSmiVersion::label);
        let Some(s) = self.status.iter_mut().find(|s| s.name == name) else {
            return;
        };
        s.version = version;
        match r {
            Ok(took) => {
                s.status = Health::Ok;
                s.error = None;
                s.last_ok_ms = Some(clock::now_ms());
                s.took_ms = Some(took);
            }
            Err(e) => {
                s.status = if s.last_ok_ms.is_some() {
                    Health::Stale
                } else {
                    Health::Down
                };
                s.error = Some(e.to_string());
                log::warn!("{name}: {e}");
            }
        }
    }

    fn warn(&mut self, name: &str, warnings: &[String]) {
        if warnings.is_empty() {
            return;
        }
        if let Some(s) = self.status.iter_mut().find(|s| s.name == name) {
            s.status = Health::Degraded;
            s.error = Some(warnings.join("; "));
        }
        for w in warnings {
            log::warn!("{name}: {w}");
        }
    }

    async fn read_version(&mut self) {
        if self.version_tried {
            return;
        }
        self.version_tried = true;
        let out = self.call(&ARGS_VERSION).await;
        self.keep(&ARGS_VERSION, &out);
        match out {
            Ok(out) => {
                self.version = AmdSmiVersion::parse(&out.stdout);
                if self.version.is_none() {
                    log::warn!(
                        "amd-smi version: unrecognised output {:?}",
                        out.stdout.trim()
                    );
                }
            }
            Err(e) => log::warn!("amd-smi version: {e}"),
        }
    }

    fn family(&self) -> Family {
        self.version
            .as_ref()
            .map_or(Family::Rocm7, AmdSmiVersion::family)
    }

    async fn read_static(&mut self) -> Result<(StaticData, Vec<String>), AmdSmiError> {
        let family = self.family();
        let part_args = partition_args();
        let (list, stat, part) =
            tokio::join!(self.call(&ARGS_LIST), self.call(&ARGS_STATIC), async {
                if family == Family::Rocm7 {
                    Some((part_args, self.call(part_args).await))
                } else {
                    None
                }
            });
        self.keep(&ARGS_LIST, &list);
        self.keep(&ARGS_STATIC, &stat);
        if let Some((args, p)) = &part {
            self.keep(args, p);
        }
        parse_static(list, stat, part.map(|(_, p)| p), clock::now_ms())
    }

    /// Every tick from amd-smi (`--source amd-smi`, recordings, replays, a remote node): the
    /// identity once (and after a change), `metric` and `process` on each call, concurrently.
    pub async fn read_now(&mut self) {
        self.read_version().await;
        if std::mem::take(&mut self.reread_static) {
            self.statics = None;
        }
        if self.statics.is_none() {
            let t = std::time::Instant::now();
            match self.read_static().await {
                Ok((s, warnings)) => {
                    self.statics = Some(s);
                    self.mark(SRC_STATIC, Ok(ms(t)));
                    self.warn(SRC_STATIC, &warnings);
                }
                Err(e) => self.mark(SRC_STATIC, Err(&e)),
            }
        }
        let t = std::time::Instant::now();
        let (metric, process) = tokio::join!(self.call(&ARGS_METRIC), self.call(&ARGS_PROCESS));
        let took = ms(t);
        self.keep(&ARGS_METRIC, &metric);
        self.keep(&ARGS_PROCESS, &process);
        self.apply_dynamic(metric, process, took);
    }

    /// Whether a caller that may wait should wait for the background read of `role`: nothing
    /// of what it needs has been read yet, or a change asked for a new read.
    pub const fn must_wait(&self, role: Role) -> bool {
        self.statics.is_none()
            || self.lane.force
            || (matches!(role, Role::Only) && self.metric.is_none())
    }

    /// The calls of one background read.
    fn lane_calls(&self, role: Role) -> Vec<Vec<&'static str>> {
        let mut calls: Vec<Vec<&'static str>> = Vec::new();
        if !self.version_tried {
            calls.push(ARGS_VERSION.to_vec());
        }
        let statics = role == Role::Identity
            || self.statics.is_none()
            || self.reread_static
            || self.lane.force;
        if statics {
            calls.push(ARGS_LIST.to_vec());
            calls.push(ARGS_STATIC.to_vec());
            if self.family() == Family::Rocm7 {
                calls.push(partition_args().to_vec());
            }
        }
        if role == Role::Only {
            calls.push(ARGS_METRIC.to_vec());
            calls.push(ARGS_PROCESS.to_vec());
        }
        calls
    }

    /// In the background (kernel first): takes a finished read, starts one that is due, and
    /// waits for it if `wait`. `refresh` is the shortest interval where amd-smi is the only
    /// source.
    pub async fn drive_lane(&mut self, wait: bool, role: Role, refresh: Duration) {
        if let Some(out) = self.lane.poll().await {
            self.apply_lane(out, role, refresh);
        }
        if self.lane.due(std::time::Instant::now()) {
            let calls = self.lane_calls(role);
            self.lane.start(self.source.clone(), calls);
        }
        if wait && let Some(out) = self.lane.wait().await {
            self.apply_lane(out, role, refresh);
        }
    }

    fn apply_lane(&mut self, out: LaneOut, role: Role, refresh: Duration) {
        let (min, share) = match role {
            Role::Identity => (self.policy.every, self.policy.budget / 5.0),
            Role::Only => (refresh, self.policy.budget),
        };
        self.lane.schedule(&out, min, share, role);
        let took = u64::try_from(out.wall.as_millis()).unwrap_or(u64::MAX);
        let mut list = None;
        let mut stat = None;
        let mut part = None;
        let mut metric = None;
        let mut process = None;
        for (args, o) in out.outputs {
            match args.first().copied() {
                Some("version") => {
                    self.version_tried = true;
                    match o {
                        Ok(o) => self.version = AmdSmiVersion::parse(&o.stdout),
                        Err(e) => log::warn!("amd-smi version: {e}"),
                    }
                }
                Some("list") => list = Some(o),
                Some("static") => stat = Some(o),
                Some("partition") => part = Some(o),
                Some("metric") => metric = Some(o),
                Some("process") => process = Some(o),
                _ => {}
            }
        }
        if let (Some(list), Some(stat)) = (list, stat) {
            self.reread_static = false;
            match parse_static(list, stat, part, clock::now_ms()) {
                Ok((st, warnings)) => {
                    self.statics = Some(st);
                    self.mark(SRC_STATIC, Ok(took));
                    self.warn(SRC_STATIC, &warnings);
                }
                Err(e) => self.mark(SRC_STATIC, Err(&e)),
            }
        }
        if let (Some(m), Some(p)) = (metric, process) {
            self.apply_dynamic(m, p, took);
        }
        if role == Role::Identity && self.statics.is_some() {
            self.identity = Some(self.snapshot());
        }
    }

    /// The last identity read, as a snapshot (kernel first).
    pub const fn identity(&self) -> Option<&Snapshot> {
        self.identity.as_ref()
    }

    /// The identity read's status, with how often it runs and what it costs (kernel first).
    pub fn identity_status(&mut self) -> Option<SourceStatus> {
        let mut st = self.status.iter().find(|s| s.name == SRC_STATIC).cloned()?;
        st.cadence = self.lane.cadence();
        if st.status == Health::Pending && st.error.is_none() {
            st.error = Some(if self.lane.running() {
                FIRST_READ_RUNNING.into()
            } else {
                NOT_READ_YET.into()
            });
        }
        Some(st)
    }

    /// What has been read so far, with the background read's cadence on `metric` (read with
    /// `process`: said once), where amd-smi is the only source.
    pub fn snapshot_budgeted(&mut self) -> Snapshot {
        let mut snap = self.snapshot();
        let cadence = self.lane.cadence();
        if let Some(s) = snap.sources.iter_mut().find(|s| s.name == SRC_METRIC) {
            s.cadence = cadence;
        }
        snap
    }

    /// Takes a `metric` and a `process` read: a count that disagrees with the layout keeps the
    /// last consistent values and asks for the layout again.
    fn apply_dynamic(
        &mut self,
        metric: Result<RawOutput, AmdSmiError>,
        process: Result<RawOutput, AmdSmiError>,
        took: u64,
    ) {
        let mut inconsistent = None;
        match metric.and_then(parse_per_gpu::<MetricEntry>) {
            Ok(m) => match self.statics.as_ref().map(|s| s.list.len()) {
                // `metric` lists another GPU count than the layout read with `list`: the node
                // was repartitioned (by partop or anyone), or amd-smi is inconsistent. This
                // sample keeps the last consistent layout and metrics and says so; the layout
                // is re-read at the start of the next sample.
                Some(n) if n > 0 && n != m.len() => {
                    let why = format!(
                        "amd-smi list shows {n} GPUs and amd-smi metric {}: the layout is changing or amd-smi is inconsistent; the last consistent layout is kept and re-read",
                        m.len()
                    );
                    log::warn!("{why}");
                    self.reread_static = true;
                    inconsistent = Some(why);
                }
                _ => {
                    self.metric = Some((m, clock::now_ms()));
                    self.mark(SRC_METRIC, Ok(took));
                }
            },
            Err(e) => self.mark(SRC_METRIC, Err(&e)),
        }
        if let Some(why) = inconsistent {
            let had = self.metric.is_some();
            if let Some(src) = self.status.iter_mut().find(|s| s.name == SRC_METRIC) {
                src.status = if had { Health::Stale } else { Health::Down };
                src.error = Some(why);
            }
        }
        match process.and_then(parse_per_gpu::<ProcessEntry>) {
            Ok(p) => {
                self.process = Some((p, clock::now_ms()));
                self.mark(SRC_PROCESS, Ok(took));
            }
            Err(e) => self.mark(SRC_PROCESS, Err(&e)),
        }
    }

    /// The snapshot from what has been read so far (the pipeline stamps host and generation).
    pub fn snapshot(&self) -> Snapshot {
        let now = clock::now_ms();
        let (gpus, processes) = self.statics.as_ref().map_or_else(Default::default, |st| {
            assemble(
                st,
                self.metric.as_ref().map(|(m, t)| (m.as_slice(), *t)),
                self.process.as_ref().map(|(p, t)| (p.as_slice(), *t)),
            )
        });
        Snapshot {
            schema: SCHEMA,
            taken_at: clock::rfc3339(now),
            taken_at_ms: now,
            sources: self.status.clone(),
            reload: self.version.as_ref().map(|v| match v.reload_method() {
                super::version::ReloadMethod::InsideSetMemory => {
                    crate::domain::plan::Reload::InsideSetMemory
                }
                super::version::ReloadMethod::ResetReload => {
                    crate::domain::plan::Reload::ResetReload
                }
                super::version::ReloadMethod::Modprobe => crate::domain::plan::Reload::Modprobe,
            }),
            gpus,
            processes,
            ..Snapshot::default()
        }
    }
}

/// The partition read: as root it adds the accelerator profiles (what can be combined).
fn partition_args() -> &'static [&'static str] {
    if nix::unistd::geteuid().is_root() {
        &ARGS_PARTITION_ROOT
    } else {
        &ARGS_PARTITION
    }
}

fn ms(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// `amd-smi version`.
pub const ARGS_VERSION: [&str; 1] = ["version"];
/// The list read.
pub const ARGS_LIST: [&str; 5] = ["list", "-e", "--json", "-g", "all"];
/// The static read.
pub const ARGS_STATIC: [&str; 9] = [
    "static", "-a", "-b", "-v", "-p", "-l", "--json", "-g", "all",
];
/// The partition read (7.x).
pub const ARGS_PARTITION: [&str; 4] = ["partition", "-c", "-m", "--json"];
/// The partition read as root (adds the accelerator profiles).
pub const ARGS_PARTITION_ROOT: [&str; 5] = ["partition", "-c", "-m", "-a", "--json"];
/// The metric read.
pub const ARGS_METRIC: [&str; 8] = ["metric", "-u", "-p", "-t", "-m", "--json", "-g", "all"];
/// The process read.
pub const ARGS_PROCESS: [&str; 4] = ["process", "--json", "-g", "all"];

/// Parses a per-GPU JSON output (metric, process).
pub fn parse_per_gpu<T: serde::de::DeserializeOwned>(
    out: RawOutput,
) -> Result<Vec<T>, AmdSmiError> {
    let out = out.json_or_error()?;
    Ok(parse_gpu_array::<T>(&out.command, &out.stdout)?.0)
}

/// Parses `partition --json` in either shape: 7.x's object of arrays, or 6.x's top-level
/// array of per-GPU rows (the family is not known yet when the first read is sent, and a node
/// may be upgraded under partop: the output's own shape decides).
pub fn parse_partition(command: &str, stdout: &str) -> Result<(PartitionDoc, Extras), AmdSmiError> {
    let (json, _) = split_output(stdout);
    if json.trim_start().starts_with('[') {
        let (rows, extras) = parse_gpu_array::<PerGpuPartitionRow>(command, stdout)?;
        return Ok((PartitionDoc::from_rows(rows), extras));
    }
    parse_object::<PartitionDoc>(command, stdout)
}

/// Parses the static reads. A failed `partition` read is a warning: the modes are also in
/// `static -p`, and caps fall back to the product table.
pub fn parse_static(
    list: Result<RawOutput, AmdSmiError>,
    stat: Result<RawOutput, AmdSmiError>,
    part: Option<Result<RawOutput, AmdSmiError>>,
    at_ms: u64,
) -> Result<(StaticData, Vec<String>), AmdSmiError> {
    let mut warnings = Vec::new();
    let list = list?.json_or_error()?;
    let (list, ex) = parse_gpu_array::<ListEntry>(&list.command, &list.stdout)?;
    warnings.extend(ex.preamble.into_iter().chain(ex.status_lines));
    let stat = stat?.json_or_error()?;
    let (statics, ex) = parse_gpu_array::<StaticEntry>(&stat.command, &stat.stdout)?;
    warnings.extend(ex.status_lines);
    let partition = match part {
        Some(r) => match r
            .and_then(RawOutput::json_or_error)
            .and_then(|o| parse_partition(&o.command, &o.stdout))
        {
            Ok((p, _)) => Some(p),
            Err(e) => {
                warnings.push(e.to_string());
                None
            }
        },
        None => None,
    };
    Ok((
        StaticData {
            list,
            statics,
            partition,
            at_ms,
        },
        warnings,
    ))
}

#[cfg(test)]
mod partition_shapes {
    use super::parse_partition;

    /// Each shape `partition --json` has been printed in (or could be, within the families'
    /// rules), 6 cases: the modes of GPU 0 are read from every one that carries them.
    #[test]
    fn every_shape_of_the_partition_read_gives_the_modes() {
        // (what, the output, GPU 0's compute and memory modes)
        type Case = (
            &'static str,
            &'static str,
            Option<(&'static str, &'static str)>,
        );
        let cases: [Case; 6] = [
            (
                "7.x object",
                r#"{"current_partition": [{"gpu_id": 0, "memory": "NPS2", "accelerator_type": "DPX", "accelerator_profile_index": 1, "partition_id": "0"}], "memory_partition": [{"gpu_id": 0, "memory_partition_caps": "NPS1,NPS2", "current_memory_partition": "NPS2"}]}"#,
                Some(("DPX", "NPS2")),
            ),
            (
                "6.x rows",
                r#"[{"gpu_id": 0, "memory": "NPS1", "accelerator_type": "SPX", "accelerator_profile_index": 0, "partition_id": "0"}]"#,
                Some(("SPX", "NPS1")),
            ),
            (
                "6.x rows keyed gpu",
                r#"[{"gpu": 0, "memory": "NPS4", "accelerator_type": "CPX", "partition_id": "0"}]"#,
                Some(("CPX", "NPS4")),
            ),
            (
                "6.3 rows, partition ids listed, text after the JSON",
                "[\n{\"gpu_id\": 0, \"memory\": \"NPS1\", \"accelerator_type\": \"CPX\", \"partition_id\": \"0,1,2,3,4,5,6,7\"},\n{\"gpu_id\": 1, \"memory\": \"NPS1\", \"accelerator_type\": \"CPX\", \"partition_id\": \"N/A\"}\n]\nsome trailing text\n",
                Some(("CPX", "NPS1")),
            ),
            (
                "6.x rows with the memory caps",
                r#"[{"gpu_id": 0, "memory": "NPS2", "accelerator_type": "DPX", "memory_partition_caps": "NPS1,NPS2", "current_memory_partition": "NPS2"}]"#,
                Some(("DPX", "NPS2")),
            ),
            (
                "rows of an unknown shape (modes then come from static -p)",
                r#"[{"gpu": 0, "partition": {"compute": "SPX"}}]"#,
                None,
            ),
        ];
        for (what, json, want) in cases {
            let (doc, _) = parse_partition("amd-smi partition -c -m --json", json)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let row = doc
                .current_partition
                .iter()
                .find(|r| r.gpu_id.0 == Some(0))
                .unwrap_or_else(|| panic!("{what}: no row for GPU 0"));
            let got = row
                .accelerator_type
                .0
                .as_deref()
                .zip(row.memory.0.as_deref());
            assert_eq!(got, want, "{what}");
        }
    }
}
