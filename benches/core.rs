//! Benchmarks (`cargo bench --bench core`): parsing a 64-logical-GPU CPX node's amd-smi output,
//! assembling the snapshot, deriving the process table for 2,000 processes, and drawing full
//! frames. A small harness (median and p95 over repeated runs) keeps the dependency tree lean;
//! figures are recorded in docs/performance.md.
#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark binary"
)]

use partop::collect::amdsmi::collector::{
    ARGS_LIST, ARGS_METRIC, ARGS_PARTITION_ROOT, ARGS_PROCESS, ARGS_STATIC, parse_per_gpu,
    parse_static,
};
use partop::collect::amdsmi::recording::Recording;
use partop::collect::amdsmi::runner::RawOutput;
use partop::collect::amdsmi::schema::{MetricEntry, ProcessEntry};
use partop::domain::findings::Thresholds;
use partop::domain::snapshot::{GpuUse, Process, Snapshot};
use partop::ui::command::Command;
use partop::ui::keymap::Keymap;
use partop::ui::state::{Msg, State, update};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bench(name: &str, mut f: impl FnMut()) {
    for _ in 0..20 {
        f();
    }
    // Calibrate to ~20 ms per sample, then take 50 samples.
    let t = Instant::now();
    let mut n = 0u32;
    while t.elapsed() < Duration::from_millis(20) {
        f();
        n += 1;
    }
    let mut samples: Vec<f64> = (0..50)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    println!(
        "{name:<44} median {:>9.1} µs   p95 {:>9.1} µs   ({n} runs x 50)",
        samples[25], samples[47]
    );
}

fn raw(rec: &Recording, args: &[&str]) -> RawOutput {
    let r = &rec.outputs[&args.join(" ")];
    RawOutput {
        command: args.join(" "),
        code: r.code,
        stdout: r.stdout.clone(),
        stderr: r.stderr.clone(),
        took: Duration::ZERO,
    }
}

fn with_processes(mut s: Snapshot, n: u32) -> Snapshot {
    let gpus = u32::try_from(s.logical_count()).unwrap();
    let names = [
        "python3",
        "pt_main_thread",
        "vllm",
        "llama-server",
        "rocm_bandwidth_",
    ];
    s.processes = (0..n)
        .map(|i| Process {
            pid: 10_000 + i,
            name: Some(names[(i % 5) as usize].into()),
            user: Some(format!("user{}", i % 17)),
            command: Some(format!(
                "vllm serve org/model-{} --port {}",
                i % 40,
                8000 + i
            )),
            gpus: vec![GpuUse {
                gpu_id: i % gpus,
                vram_bytes: Some(u64::from(i) << 24),
                gtt_bytes: Some(2 << 20),
                cu_occupancy: Some(i % 38),
                cu_percent: Some(f64::from(i % 38) * 100.0 / 38.0),
                ..GpuUse::default()
            }],
            ..Process::default()
        })
        .collect();
    s
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recordings/cpx-nps4-small-models.json");
    let rec = Recording::load(&path).unwrap();
    let metric = raw(&rec, &ARGS_METRIC);
    let process = raw(&rec, &ARGS_PROCESS);
    println!(
        "input: 64 logical GPUs (8x MI300X CPX/NPS4): metric {} KiB, process {} KiB of amd-smi JSON",
        metric.stdout.len() / 1024,
        process.stdout.len() / 1024
    );

    bench("parse metric + process (64 logical GPUs)", || {
        let m = parse_per_gpu::<MetricEntry>(black_box(metric.clone())).unwrap();
        let p = parse_per_gpu::<ProcessEntry>(black_box(process.clone())).unwrap();
        black_box((m, p));
    });
    let (st, _) = parse_static(
        Ok(raw(&rec, &ARGS_LIST)),
        Ok(raw(&rec, &ARGS_STATIC)),
        Some(Ok(raw(&rec, &ARGS_PARTITION_ROOT))),
        0,
    )
    .unwrap();
    let m = parse_per_gpu::<MetricEntry>(metric.clone()).unwrap();
    let p = parse_per_gpu::<ProcessEntry>(process.clone()).unwrap();
    bench("assemble snapshot (64 logical GPUs)", || {
        black_box(partop::collect::amdsmi::assemble::assemble(
            &st,
            Some((&m, 1)),
            Some((&p, 1)),
        ));
    });

    let (gpus, _) = partop::collect::amdsmi::assemble::assemble(&st, Some((&m, 1)), Some((&p, 1)));
    let snap = Arc::new(with_processes(
        Snapshot {
            gpus,
            taken_at_ms: 1,
            ..Snapshot::default()
        },
        2000,
    ));
    let (km, _) = Keymap::load("default", None, false);
    let mut state = State::new(km, Thresholds::default(), 1000);
    bench(
        "reduce a snapshot (2,000 processes: rows, findings)",
        || {
            update(&mut state, Msg::Snapshot(Arc::clone(&snap)));
        },
    );
    let theme = Theme::load("default", Path::new("/nonexistent")).0;
    for (w, h) in [(80u16, 24u16), (250, 70)] {
        update(&mut state, Msg::Resize(w, h));
        for (cmd, name) in [
            (Command::ViewOverview, "overview"),
            (Command::ViewGpus, "gpus"),
            (Command::ViewProcesses, "processes"),
        ] {
            update(&mut state, Msg::Command(cmd));
            let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
            bench(
                &format!("frame {name} {w}x{h} (64 GPUs, 2,000 procs)"),
                || {
                    term.draw(|f| partop::ui::view::render(f, &state, &theme))
                        .unwrap();
                },
            );
        }
    }
}
