//! The amd-smi collector: detects the version once, reads static data at start and after a
//! change, and metrics + processes on every tick, concurrently. A failed or late read keeps the
//! last good values (their timestamps age) and marks that source stale with the error.

use super::assemble::{StaticData, assemble};
use super::error::AmdSmiError;
use super::json::{parse_gpu_array, parse_object};
use super::runner::Runner;
use super::schema::{ListEntry, MetricEntry, PartitionDoc, ProcessEntry, StaticEntry};
use super::version::{AmdSmiVersion, Family};
use crate::collect::{clock, host};
use crate::domain::snapshot::{Health, SCHEMA, Snapshot, SourceStatus};

/// Source names as shown in the header and the JSON.
pub const SRC_STATIC: &str = "amd-smi static";
/// Metrics source.
pub const SRC_METRIC: &str = "amd-smi metric";
/// Processes source.
pub const SRC_PROCESS: &str = "amd-smi process";

/// Collector state.
#[derive(Debug)]
pub struct AmdSmiCollector {
    runner: Runner,
    version: Option<AmdSmiVersion>,
    version_tried: bool,
    statics: Option<StaticData>,
    metric: Option<(Vec<MetricEntry>, u64)>,
    process: Option<(Vec<ProcessEntry>, u64)>,
    status: Vec<SourceStatus>,
    generation: u64,
    host: String,
    /// Marks snapshots as simulated.
    pub simulated: bool,
}

fn status(name: &str) -> SourceStatus {
    SourceStatus {
        name: name.to_string(),
        version: None,
        status: Health::Down,
        error: None,
        last_ok_ms: None,
        took_ms: None,
    }
}

impl AmdSmiCollector {
    /// A collector using `runner`.
    pub fn new(runner: Runner) -> Self {
        Self {
            runner,
            version: None,
            version_tried: false,
            statics: None,
            metric: None,
            process: None,
            status: vec![status(SRC_STATIC), status(SRC_METRIC), status(SRC_PROCESS)],
            generation: 0,
            host: host::hostname(),
            simulated: false,
        }
    }

    /// The detected version.
    pub const fn version(&self) -> Option<&AmdSmiVersion> {
        self.version.as_ref()
    }

    /// The runner (executors reuse it for `set`/`reset`).
    pub const fn runner(&self) -> &Runner {
        &self.runner
    }

    /// Forces a static re-read on the next sample (after a repartition).
    pub fn invalidate_static(&mut self) {
        self.statics = None;
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
        match self.runner.run(&["version"]).await {
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

    async fn read_static(&self) -> Result<(StaticData, Vec<String>), AmdSmiError> {
        let family = self
            .version
            .as_ref()
            .map_or(Family::Rocm7, AmdSmiVersion::family);
        let list_args = ["list", "-e", "--json", "-g", "all"];
        let static_args = [
            "static", "-a", "-b", "-v", "-p", "-l", "--json", "-g", "all",
        ];
        let part_args = ["partition", "-c", "-m", "--json"];
        let (list, stat, part) = tokio::join!(
            self.runner.run(&list_args),
            self.runner.run(&static_args),
            async {
                if family == Family::Rocm7 {
                    Some(self.runner.run(&part_args).await)
                } else {
                    None
                }
            }
        );
        let mut warnings = Vec::new();
        let list = list?.json_or_error()?;
        let (list, ex) = parse_gpu_array::<ListEntry>(&list.command, &list.stdout)?;
        warnings.extend(ex.preamble.into_iter().chain(ex.status_lines));
        let stat = stat?.json_or_error()?;
        let (statics, ex) = parse_gpu_array::<StaticEntry>(&stat.command, &stat.stdout)?;
        warnings.extend(ex.status_lines);
        let partition = match part {
            Some(Ok(out)) => match out
                .json_or_error()
                .and_then(|o| parse_object::<PartitionDoc>(&o.command, &o.stdout))
            {
                Ok((p, _)) => Some(p),
                Err(e) => {
                    // Modes are also in `static -p`; caps fall back to the product table.
                    warnings.push(e.to_string());
                    None
                }
            },
            Some(Err(e)) => {
                warnings.push(e.to_string());
                None
            }
            None => None,
        };
        Ok((
            StaticData {
                list,
                statics,
                partition,
                at_ms: clock::now_ms(),
            },
            warnings,
        ))
    }

    async fn read_metric(&self) -> Result<Vec<MetricEntry>, AmdSmiError> {
        let out = self
            .runner
            .run(&["metric", "-u", "-p", "-t", "-m", "--json", "-g", "all"])
            .await?;
        let out = out.json_or_error()?;
        Ok(parse_gpu_array::<MetricEntry>(&out.command, &out.stdout)?.0)
    }

    async fn read_process(&self) -> Result<Vec<ProcessEntry>, AmdSmiError> {
        let out = self.runner.run(&["process", "--json", "-g", "all"]).await?;
        let out = out.json_or_error()?;
        Ok(parse_gpu_array::<ProcessEntry>(&out.command, &out.stdout)?.0)
    }

    /// One collection. Never fails: errors become source health, and the last good values stay.
    pub async fn sample(&mut self) -> Snapshot {
        self.read_version().await;
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
        let (metric, process) = tokio::join!(self.read_metric(), self.read_process());
        let took = ms(t);
        match metric {
            Ok(m) => {
                self.metric = Some((m, clock::now_ms()));
                self.mark(SRC_METRIC, Ok(took));
            }
            Err(e) => self.mark(SRC_METRIC, Err(&e)),
        }
        match process {
            Ok(p) => {
                self.process = Some((p, clock::now_ms()));
                self.mark(SRC_PROCESS, Ok(took));
            }
            Err(e) => self.mark(SRC_PROCESS, Err(&e)),
        }
        self.snapshot()
    }

    /// The snapshot from what has been read so far.
    pub fn snapshot(&mut self) -> Snapshot {
        self.generation += 1;
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
            host: self.host.clone(),
            taken_at: clock::rfc3339(now),
            taken_at_ms: now,
            generation: self.generation,
            simulated: self.simulated,
            sources: self.status.clone(),
            gpus,
            processes,
        }
    }
}

fn ms(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}
