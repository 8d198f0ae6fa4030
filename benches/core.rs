//! Benchmarks (`cargo bench --bench core`): parsing a 64-logical-GPU CPX node's amd-smi output,
//! assembling the snapshot, deriving the process table for 2,000 processes, and drawing full
//! frames. A small harness (median and p95 over repeated runs) keeps the dependency tree lean;
//! figures are recorded in docs/performance.md.
#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark binary"
)]

use partop::collect::amdsmi::reader::{
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

fn bench(name: &str, mut f: impl FnMut()) -> Duration {
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
    Duration::from_secs_f64(samples[25] / 1e6)
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

    let _ = bench("parse metric + process (64 logical GPUs)", || {
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
    kernel_vs_amdsmi(&metric, &process);
    safety_costs(&snap);
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

/// Writes a kernel tree like a CPX/NPS4 node of 8 MI300X (64 logical GPUs) with `procs` ROCm
/// processes, each holding /dev/kfd and one render node, with KFD files and an fdinfo. The
/// binary tables are the fixture's.
fn kernel_tree(root: &Path, procs: u32) {
    use std::fs::{create_dir_all, write};
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mi300x-cpx-nps4");
    let pci = "sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0";
    let gm = std::fs::read(fx.join(pci).join("gpu_metrics")).unwrap();
    let xm = std::fs::read(fx.join(pci).join("xcp/xcp_metrics")).unwrap();
    let buses = ["05", "26", "46", "65", "85", "a6", "c6", "e5"];
    let cpu = root.join("sys/class/kfd/kfd/topology/nodes/0");
    create_dir_all(&cpu).unwrap();
    write(cpu.join("gpu_id"), "0\n").unwrap();
    for (g, bus) in buses.iter().enumerate() {
        let d = root.join(format!("sys/bus/pci/devices/0000:{bus}:00.0"));
        create_dir_all(d.join("hwmon/hwmon0")).unwrap();
        create_dir_all(d.join("xcp")).unwrap();
        for (f, v) in [
            ("vendor", "0x1002"),
            ("device", "0x74a1"),
            ("current_compute_partition", "CPX"),
            ("current_memory_partition", "NPS4"),
            ("available_compute_partition", "QPX, CPX"),
            ("available_memory_partition", "NPS1, NPS4"),
            ("mem_info_vram_total", "205822885888"),
            ("hwmon/hwmon0/temp2_input", "52000"),
            ("hwmon/hwmon0/temp3_input", "44000"),
            ("hwmon/hwmon0/power1_input", "312000000"),
            ("hwmon/hwmon0/power1_cap", "750000000"),
        ] {
            write(d.join(f), format!("{v}\n")).unwrap();
        }
        write(d.join("gpu_metrics"), &gm).unwrap();
        write(d.join("xcp/xcp_metrics"), &xm).unwrap();
        let bus_n = u32::from_str_radix(bus, 16).unwrap();
        for p in 0..8u32 {
            let node = g as u32 * 8 + p + 1;
            let minor = 128 + g as u32 * 8 + p;
            let n = root.join(format!("sys/class/kfd/kfd/topology/nodes/{node}"));
            create_dir_all(n.join("mem_banks/0")).unwrap();
            write(n.join("gpu_id"), format!("{}\n", 1000 + node)).unwrap();
            write(n.join("properties"), format!("cpu_cores_count 0\nsimd_count 152\nnum_xcc 1\ndrm_render_minor {minor}\nlocation_id {}\ndomain 0\n", (bus_n << 8) | p)).unwrap();
            write(
                n.join("mem_banks/0/properties"),
                "heap_type 1\nsize_in_bytes 25727860736\n",
            )
            .unwrap();
            if p > 0 {
                let x = root.join(format!("sys/devices/platform/amdgpu_xcp_{minor}"));
                create_dir_all(x.join(format!("drm/renderD{minor}"))).unwrap();
                create_dir_all(x.join("xcp")).unwrap();
                write(x.join("xcp/xcp_metrics"), &xm).unwrap();
                write(x.join(format!("drm/renderD{minor}/device")), "../..").unwrap();
                create_dir_all(root.join("sys/class/drm")).unwrap();
                write(
                    root.join(format!("sys/class/drm/renderD{minor}")),
                    format!("../../devices/platform/amdgpu_xcp_{minor}/drm/renderD{minor}"),
                )
                .unwrap();
            }
        }
    }
    // `procs` processes, like a busy host: two GPU processes per logical GPU (a ROCm server
    // holding /dev/kfd and its render node, with KFD files and an fdinfo), the rest ordinary
    // processes with a few fds.
    for i in 0..procs {
        let pid = 10_000 + i;
        let d = root.join(format!("proc/{pid}"));
        create_dir_all(d.join("fd")).unwrap();
        create_dir_all(d.join("fdinfo")).unwrap();
        write(d.join("comm"), "python3\n").unwrap();
        write(d.join("cmdline"), "python3\0serve.py\0").unwrap();
        write(d.join("fd/0"), "/dev/null").unwrap();
        write(d.join("fd/1"), "pipe:[1234]").unwrap();
        write(d.join("fd/2"), "pipe:[1234]").unwrap();
        write(d.join("fd/5"), "socket:[99]").unwrap();
        if i >= 128 {
            continue;
        }
        let node = i % 64 + 1;
        let minor = 127 + node;
        write(
            d.join("environ"),
            format!("HIP_VISIBLE_DEVICES={}\0", node - 1),
        )
        .unwrap();
        write(d.join("fd/3"), "/dev/kfd").unwrap();
        write(d.join("fd/4"), format!("/dev/dri/renderD{minor}")).unwrap();
        write(d.join("fdinfo/4"), format!("pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t{pid}\ndrm-pdev:\t0000:05:00.0\npasid:\t{pid}\ndrm-resident-vram:\t512 MiB\ndrm-resident-gtt:\t2 MiB\ndrm-engine-compute:\t{} ns\n", u64::from(pid) * 1000)).unwrap();
        let k = root.join(format!("sys/class/kfd/kfd/proc/{pid}"));
        create_dir_all(k.join(format!("stats_{}", 1000 + node))).unwrap();
        write(k.join(format!("vram_{}", 1000 + node)), "536870912\n").unwrap();
        write(k.join(format!("sdma_{}", 1000 + node)), "1000\n").unwrap();
        write(
            k.join(format!("stats_{}/cu_occupancy", 1000 + node)),
            "12\n",
        )
        .unwrap();
    }
    write(root.join("sys/class/kfd/kfd/topology/generation_id"), "1\n").unwrap();
}

/// The kernel collector on a 64-GPU, 2,000-process tree, and, in the same run, the amd-smi path
/// for the same node size: the simulator's amd-smi as a subprocess (metric + process, as each
/// sample runs them) plus parsing.
fn kernel_vs_amdsmi(metric: &RawOutput, process: &RawOutput) {
    let dir = tempfile::tempdir().unwrap();
    kernel_tree(dir.path(), 2000);
    let mut k = partop::collect::sysfs::SysfsCollector::new(partop::collect::holders::Roots {
        proc_root: dir.path().join("proc"),
        sys_root: dir.path().join("sys"),
        dev_root: "/dev".into(),
        fdinfo_root: dir.path().join("proc"),
    });
    let s = k.sample();
    assert_eq!(s.logical_count(), 64);
    assert_eq!(s.processes.len(), 128);
    // Steady state: the layout and the holders are known; only values are read. Every
    // `full_scan_every` (5) samples the /proc fd scan runs too (measured next).
    k.full_scan_every = u64::MAX;
    let kernel = bench(
        "kernel sample, steady (64 GPUs, 2,000 procs, 128 on GPUs)",
        || {
            black_box(k.sample());
        },
    );
    k.full_scan_every = 1;
    let _ = bench("kernel sample, full /proc fd scan (same node)", || {
        black_box(k.sample());
    });
    if let Some(keep) = std::env::var_os("PARTOP_BENCH_TREE") {
        // For `strace -c` of `partop --source sysfs` on the same tree (docs/performance.md).
        kernel_tree(Path::new(&keep), 2000);
    }
    let exe = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/partop");
    if !exe.exists() {
        println!("(amd-smi path skipped: build target/release/partop first)");
        return;
    }
    let state = dir.path().join("sim.json");
    let st = std::process::Command::new(&exe)
        .args(["sim", "start", "cpx-64-busy", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(st.status.success());
    let run = |args: &[&str]| {
        std::process::Command::new(&exe)
            .args(["sim", "amd-smi", "--state"])
            .arg(&state)
            .args(args)
            .output()
            .unwrap()
    };
    let amd = bench(
        "amd-smi path: fake amd-smi metric + process subprocesses + parse",
        || {
            let m = run(&ARGS_METRIC);
            let p = run(&ARGS_PROCESS);
            let mo = RawOutput {
                stdout: String::from_utf8_lossy(&m.stdout).into_owned(),
                ..metric.clone()
            };
            let po = RawOutput {
                stdout: String::from_utf8_lossy(&p.stdout).into_owned(),
                ..process.clone()
            };
            black_box(parse_per_gpu::<MetricEntry>(mo).unwrap());
            black_box(parse_per_gpu::<ProcessEntry>(po).unwrap());
        },
    );
    let _ = std::process::Command::new(&exe)
        .args(["sim", "stop", "--state"])
        .arg(&state)
        .output();
    println!(
        "ratio: the amd-smi path (with partop's own fast fake amd-smi) costs {:.1}x the kernel collector",
        amd.as_secs_f64() / kernel.as_secs_f64()
    );
}

/// What the safety rules add (issue 13), each beside the path it replaced or guards.
fn safety_costs(snap: &Snapshot) {
    println!("-- safety rules (issue 13)");
    let base = (*snap).clone();
    bench("sanity check of a snapshot (64 GPUs, 2,000 procs)", || {
        let mut s = base.clone();
        partop::domain::sanity::check(&mut s);
        black_box(s);
    });
    bench("  its clone alone (the baseline of the line above)", || {
        black_box(base.clone());
    });
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let t = partop::exec::signal::target_from_proc(Path::new("/proc"), child.id()).unwrap();
    bench("pin a target (pidfd_open + start-time read)", || {
        black_box(partop::exec::signal::pin(Path::new("/proc"), &t).unwrap());
    });
    bench("  start-time read alone (the old check)", || {
        black_box(partop::exec::signal::start_ticks(Path::new("/proc"), t.pid));
    });
    let _ = child.kill();
    let _ = child.wait();
    let dir = std::env::temp_dir().join(format!("partop-bench-{}", std::process::id()));
    let j = dir.join("journal.jsonl");
    bench("journal entry appended and fsynced (journal first)", || {
        partop::exec::journal::append(
            &j,
            &partop::exec::journal::Entry::new(
                "kill.sigterm",
                true,
                serde_json::json!([{"pid": 1}]),
                serde_json::json!({"state": "sending"}),
            ),
        )
        .unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
}
