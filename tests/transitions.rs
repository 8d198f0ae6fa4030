//! Every repartition a node can make (issue 23), on the simulated node through the real binary
//! and its fake amd-smi: for every product partop knows, every valid (compute, memory) state to
//! every other, for all GPUs and for a subset of them. Each case plans, applies, and checks the
//! node against an oracle written here from the hardware's rules (not from the planner): the
//! modes of every GPU, the logical count, every registered model that fits healthy on its
//! planned logical GPU, every model that does not fit named in the plan, the journal's story,
//! and nothing else changed. The simulator runs at `time_scale = 0.01` (its documented setting),
//! so the whole space fits in CI's time; the cases run on several nodes at once (they mostly
//! wait).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]
#![allow(clippy::print_stderr, reason = "each test says how many cases it ran")]

mod common;
use common::env::SimEnv;
use common::run;
use partop::domain::modes::{ComputeMode, MemoryMode};
use partop::domain::plan::Plan;
use partop::domain::product::{self, Product};
use std::sync::{Arc, Mutex};

type State = (ComputeMode, MemoryMode);

/// A node's walk: its product, the product's states, the edges it walks.
type Walk = (Product, Vec<State>, Vec<(usize, usize)>);

/// Every valid uniform state of a product, from its profile table.
fn states(p: &Product) -> Vec<State> {
    let mut v = Vec::new();
    for prof in &p.profiles {
        for m in &prof.memory {
            v.push((prof.compute, *m));
        }
    }
    v
}

/// An Euler circuit of the complete directed graph on `n` states: every ordered pair once, each
/// edge starting where the last ended (so one node walks them without being reset).
fn circuit(n: usize) -> Vec<(usize, usize)> {
    let mut left: Vec<Vec<usize>> = (0..n)
        .map(|a| (0..n).filter(|b| *b != a).rev().collect())
        .collect();
    let mut stack = vec![0];
    let mut path = Vec::new();
    while let Some(&v) = stack.last() {
        if let Some(w) = left[v].pop() {
            stack.push(w);
        } else {
            path.push(stack.pop().unwrap());
        }
    }
    path.reverse();
    path.windows(2).map(|w| (w[0], w[1])).collect()
}

/// The oracle: what each GPU is after a change to `to` on `scope` (indices; empty = all), from
/// the rules of the hardware and of `keep`: a memory mode is hive-wide and a reload returns
/// every GPU to the driver's default compute mode; a GPU outside the scope keeps its compute
/// mode where the new memory mode offers it, else takes that default.
fn expected(p: &Product, now: &[State], scope: &[usize], to: State) -> Vec<State> {
    let memory_change = now.iter().any(|s| s.1 != to.1);
    now.iter()
        .enumerate()
        .map(|(i, s)| {
            if scope.is_empty() || scope.contains(&i) {
                to
            } else if !memory_change {
                *s
            } else if p.offers(s.0, to.1) {
                (s.0, to.1)
            } else {
                (p.default_compute_for(to.1), to.1)
            }
        })
        .collect()
}

fn scenario(p: &Product, start: State, big: bool) -> String {
    let mut s = format!(
        "name = \"tx\"\ndescription = \"transition space\"\nproduct = \"{}\"\ngpus = 4\ncompute = \"{}\"\nmemory = \"{}\"\nrocm = \"7.0.2\"\nseed = 3\nreload_secs = 6\ntime_scale = 0.01\n",
        p.key, start.0, start.1
    );
    s.push_str("[[workload]]\nname = \"small\"\nkind = \"model-server\"\ngpu = 1\nvram_gb = 16\nbusy = 40\nmodel = \"org/small\"\n");
    s.push_str(
        "[[workload]]\nname = \"job\"\nkind = \"batch\"\ngpu = 2\nvram_gb = 10\nbusy = 30\n",
    );
    if big {
        s.push_str("[[workload]]\nname = \"big\"\nkind = \"model-server\"\ngpu = 0\nvram_gb = 100\nbusy = 40\nmodel = \"org/big\"\n");
    }
    s
}

/// GiB of one partition of a state.
fn partition_gib(p: &Product, s: State) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "sizes")]
    let total = p.vram_mb as f64 / 1024.0;
    total / f64::from(s.0.partitions(p.xcds))
}

struct Case {
    product: &'static str,
    from: String,
    scope: &'static str,
}

/// One walk of a node along `edges` (consecutive), each edge three applies: the subset case,
/// back to the uniform start from the mixed state, then the all-GPU case. Returns the cases run
/// or the first failure.
fn walk(p: &Product, sts: &[State], edges: &[(usize, usize)]) -> Result<Vec<Case>, String> {
    let start = sts[edges[0].0];
    let e = SimEnv::new(&scenario(p, start, partition_gib(p, start) >= 100.0));
    let bdfs: Vec<String> = e
        .state()
        .gpus
        .iter()
        .map(|g| format!("0000:{}:00", g.bus))
        .collect();
    // Four physical GPUs (the layout files a hive of eight has, at half the cost), and a
    // subset that leaves the first GPU out, so every index after it moves.
    let subset = [1usize, 3];
    let mut cases = Vec::new();
    for (a, b) in edges {
        let (x, y) = (sts[*a], sts[*b]);
        for (scope, to) in [(&subset[..], y), (&[][..], x), (&[][..], y)] {
            let now: Vec<State> = e
                .state()
                .gpus
                .iter()
                .map(|g| (g.modes.compute, g.modes.memory))
                .collect();
            let from = describe(&now);
            let want = expected(p, &now, scope, to);
            let gpus: Vec<String> = scope.iter().map(|i| bdfs[*i].clone()).collect();
            let what = format!(
                "{}: {from} -> {}/{} on {}",
                p.key,
                to.0,
                to.1,
                if gpus.is_empty() {
                    "all".into()
                } else {
                    gpus.join(",")
                }
            );
            let t = std::time::Instant::now();
            one(&e, p, &gpus, to, &want).map_err(|m| format!("{what}: {m}"))?;
            if std::env::var_os("PARTOP_TX_VERBOSE").is_some() {
                eprintln!("{what}: {:.1}s", t.elapsed().as_secs_f64());
            }
            cases.push(Case {
                product: p.key,
                from,
                scope: if scope.is_empty() { "all" } else { "subset" },
            });
        }
    }
    Ok(cases)
}

/// The last lines the node's kernel twin logged (what a failure needs to be understood).
fn twin_log(e: &SimEnv) -> String {
    let log = e.node.state.with_extension("logs").join("kernel-twin.log");
    let text =
        std::fs::read_to_string(&log).unwrap_or_else(|err| format!("{}: {err}", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn describe(s: &[State]) -> String {
    let mut v: Vec<String> = s.iter().map(|(c, m)| format!("{c}/{m}")).collect();
    v.dedup();
    v.join("+")
}

/// Plans and applies one change and checks the node afterwards.
fn one(e: &SimEnv, p: &Product, gpus: &[String], to: State, want: &[State]) -> Result<(), String> {
    let before = e.state();
    let alive_before: Vec<(String, Option<u32>)> = before
        .workloads
        .iter()
        .enumerate()
        .filter(|(i, _)| before.alive(*i))
        .map(|(_, w)| (w.spec.name.clone(), w.pid))
        .collect();
    let mut tries = 0;
    let (plan, out) = loop {
        tries += 1;
        let mut c = e.cmd();
        c.arg("plan")
            .arg("--compute")
            .arg(to.0.to_string())
            .arg("--memory")
            .arg(to.1.to_string())
            .arg("--json");
        if !gpus.is_empty() {
            c.arg("--gpu").args(gpus);
        }
        let o = run(&mut c, "");
        if o.code != 0 {
            return Err(format!("plan failed: {}", o.stderr));
        }
        let path = e.node.dir.path().join("p.json");
        std::fs::write(&path, &o.stdout).unwrap();
        let plan: Plan = serde_json::from_str(&o.stdout).unwrap();
        let a = e.apply(&path, "--yes --grace 3", "");
        // A model relaunched by the last change may open its GPU between the plan and the
        // apply: the apply refuses (nothing changed) and the plan is made again.
        let raced = a.code != 0
            && (a.stderr.contains("changed since this plan was made")
                || a.stderr.contains("is not in the plan"));
        if raced && tries < 40 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        if a.code != 0 {
            return Err(format!(
                "apply exit {}: {}{}\nkernel twin log (tail):\n{}",
                a.code,
                a.stdout,
                a.stderr,
                twin_log(e)
            ));
        }
        break (plan, a);
    };
    let st = e.state();
    let got: Vec<State> = st
        .gpus
        .iter()
        .map(|g| (g.modes.compute, g.modes.memory))
        .collect();
    if got != want {
        return Err(format!(
            "ends in {} not {}\n{}",
            describe(&got),
            describe(want),
            out.stdout
        ));
    }
    let count: u32 = want.iter().map(|(c, _)| c.partitions(p.xcds)).sum();
    if st.logical().len() != count as usize || plan.after.len() != count as usize {
        return Err(format!(
            "{} logical GPUs (plan said {}), the hardware gives {count}",
            st.logical().len(),
            plan.after.len()
        ));
    }
    // Every registered model that fits is healthy on its planned logical GPU; every one that
    // does not was named in the plan.
    for m in &plan.models {
        if m.to.is_empty() {
            if !plan
                .warnings
                .iter()
                .any(|w| w.contains(&format!("model {} does not fit", m.name)))
            {
                return Err(format!("{} not relaunched and not named", m.name));
            }
            continue;
        }
        let i = st
            .workloads
            .iter()
            .position(|w| w.spec.name == m.name)
            .unwrap();
        if !st.alive(i) {
            return Err(format!("{} planned on {:?} is not running", m.name, m.to));
        }
        let pid = st.workloads[i].pid.unwrap();
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let ids: Vec<String> = m.to.iter().map(|r| r.gpu_id.to_string()).collect();
        let want_env = format!("HIP_VISIBLE_DEVICES={}", ids.join(","));
        if !env.split(|b| *b == 0).any(|v| v == want_env.as_bytes()) {
            return Err(format!("{} does not run with {want_env}", m.name));
        }
        let h = partop::collect::served::http::get(
            &format!("http://127.0.0.1:{}/health", st.workloads[i].port),
            std::time::Duration::from_secs(2),
        );
        if !h.is_ok_and(|r| r.status == 200) {
            return Err(format!("{} is not healthy", m.name));
        }
    }
    // Nothing else changed: what ran and was not stopped runs on, with the same pid; nothing
    // that was not running (the batch job after its stop) came back.
    for (i, w) in st.workloads.iter().enumerate() {
        let was = alive_before
            .iter()
            .find(|(n, _)| *n == w.spec.name)
            .map(|x| x.1);
        let stopped = plan.stops.iter().any(|s| Some(s.pid) == was.flatten());
        let relaunched = plan
            .models
            .iter()
            .any(|m| m.name == w.spec.name && !m.to.is_empty());
        match (was.is_some(), stopped, st.alive(i)) {
            (true, false, true) if w.pid != was.flatten() => {
                return Err(format!("{} was restarted though not stopped", w.spec.name));
            }
            (true, false, false) => {
                return Err(format!("{} died though not stopped", w.spec.name));
            }
            (_, _, true) if !relaunched && (was.is_none() || stopped) => {
                return Err(format!("{} runs, the plan did not start it", w.spec.name));
            }
            _ => {}
        }
        if stopped
            && !relaunched
            && w.spec.model.is_none()
            && !plan
                .warnings
                .iter()
                .any(|x| x.contains("does NOT come back"))
        {
            return Err(format!(
                "{} stopped for good, the plan did not say",
                w.spec.name
            ));
        }
    }
    // The journal tells the story: the run started, every step begun and done, closed.
    let runs = partop::exec::journal::runs(&e.journal());
    let r = runs
        .iter()
        .rev()
        .find(|r| r.fingerprint == plan.fingerprint)
        .ok_or("no run in the journal")?;
    if r.closed != Some(partop::domain::journal::Close::Done) || r.done.len() != plan.steps.len() {
        return Err(format!(
            "journal: closed {:?}, {} of {} steps done",
            r.closed,
            r.done.len(),
            plan.steps.len()
        ));
    }
    Ok(())
}

#[test]
fn every_transition_of_every_product_for_all_gpus_and_a_subset() {
    // The walks: each product's circuit cut into pieces of a few edges, a node per piece.
    let mut walks: Vec<Walk> = Vec::new();
    let mut pairs = 0;
    // PARTOP_TX_PRODUCT=KEY walks one product (to look at one while changing it); unset, all.
    let only = std::env::var("PARTOP_TX_PRODUCT").ok();
    for p in product::all()
        .into_iter()
        .filter(|p| only.as_deref().is_none_or(|o| o == p.key))
    {
        let sts = states(&p);
        let c = circuit(sts.len());
        pairs += c.len();
        for piece in c.chunks(5) {
            walks.push((p.clone(), sts.clone(), piece.to_vec()));
        }
    }
    let walks = Arc::new(Mutex::new(walks));
    let done: Arc<Mutex<Vec<Case>>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let t0 = std::time::Instant::now();
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (walks, done, failed) = (walks.clone(), done.clone(), failed.clone());
            std::thread::spawn(move || {
                loop {
                    let Some((p, sts, edges)) = walks.lock().unwrap().pop() else {
                        return;
                    };
                    match walk(&p, &sts, &edges) {
                        Ok(c) => done.lock().unwrap().extend(c),
                        Err(e) => failed.lock().unwrap().push(e),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let failed = failed.lock().unwrap();
    assert!(
        failed.is_empty(),
        "{} walk(s) failed:\n{}",
        failed.len(),
        failed.join("\n\n")
    );
    let done = done.lock().unwrap();
    // Every ordered pair of uniform states, both scopes, and the mixed-to-uniform returns.
    assert_eq!(done.len(), pairs * 3);
    let subset = done.iter().filter(|c| c.scope == "subset").count();
    let mixed = done.iter().filter(|c| c.from.contains('+')).count();
    let products: std::collections::BTreeSet<&str> = done.iter().map(|c| c.product).collect();
    eprintln!(
        "transition space: {} applies in {:.0}s over {} products: {pairs} ordered pairs of states, each for a subset of GPUs and for all GPUs, and {mixed} changes from a mixed layout",
        done.len(),
        t0.elapsed().as_secs_f64(),
        products.len(),
    );
    if only.is_none() {
        assert_eq!(products.len(), product::all().len());
    }
    assert_eq!(subset, pairs);
}

#[test]
fn the_circuit_visits_every_ordered_pair_once() {
    for n in 1..9 {
        let c = circuit(n);
        assert_eq!(c.len(), n * (n - 1));
        let set: std::collections::HashSet<_> = c.iter().collect();
        assert_eq!(set.len(), c.len());
        assert!(c.windows(2).all(|w| w[0].1 == w[1].0));
    }
}
