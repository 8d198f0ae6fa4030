//! Replica sets on the simulated node (issue 29): AMD's guide's 12B model as a `fill` set, one
//! server per logical GPU, through real plans and applies: SPX -> DPX doubles the set, DPX ->
//! SPX halves it (the surplus stop first and are not relaunched).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::env::SimEnv;
use common::{guide_node, run};
use partop::domain::plan::Plan;

/// One HTTP/1.0 request to a simulated server: (status line, body).
fn get(port: u16, path: &str) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    let (head, body) = b.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

fn plan_of(e: &SimEnv, args: &str) -> (std::path::PathBuf, Plan) {
    // Planned once every member holds its GPU (a relaunched server opens its render node a
    // moment after it starts: a plan in that moment would not list it among the stops).
    let mut p = e.plan(args, "p.json");
    common::wait_until("the members to hold their GPUs", || {
        p = e.plan(args, "p.json");
        let plan: Plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        !plan.stops.is_empty() && plan.stops.iter().all(|s| !s.gpus.is_empty())
    });
    let plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    (p, plan)
}

/// Every member answers a completion itself: `served_by` names it (the request reached it).
fn members_answer(e: &SimEnv, n: u32) -> Vec<u16> {
    let st = e.state();
    let mut ports = Vec::new();
    for k in 1..=n {
        let name = format!("mistral-12b#{k}");
        let w = st
            .workloads
            .iter()
            .find(|w| w.spec.name == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let (status, body) = get(w.port, "/v1/completions").unwrap_or_default();
        assert!(status.contains("200"), "{name} on {}: {status}", w.port);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["served_by"], name.as_str(), "{body}");
        ports.push(w.port);
    }
    ports
}

#[test]
fn a_fill_set_doubles_on_dpx_and_halves_back_on_spx() {
    let e = SimEnv::new(&guide_node());
    let first = members_answer(&e, 8);
    assert!(
        first.windows(2).all(|w| w[1] == w[0] + 1),
        "one port range: {first:?}"
    );
    // SPX -> DPX: 8 members become 16, ports first..first+15.
    let (p, plan) = plan_of(&e, "--compute DPX --memory NPS2");
    assert_eq!(plan.sets.len(), 1, "{:?}", plan.sets);
    let c = &plan.sets[0];
    assert_eq!((c.before, c.after), (8, 16), "{c}");
    assert_eq!(
        c.to_string(),
        format!(
            "mistral-12b: 8 replicas on SPX/NPS1 -> 16 on DPX/NPS2, ports {}-{}",
            first[0],
            first[0] + 15
        )
    );
    assert_eq!(plan.models.len(), 16);
    assert!(
        plan.models.iter().all(|m| m.to.len() == 1),
        "{:?}",
        plan.models
    );
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
    let ports = members_answer(&e, 16);
    assert_eq!(ports, (first[0]..first[0] + 16).collect::<Vec<_>>());
    let list = run(e.cmd().args(["models", "list"]), "");
    assert!(
        list.stdout.contains("set mistral-12b: 16/16 healthy"),
        "{}",
        list.stdout
    );

    // DPX -> SPX: the set shrinks to 8; members 9-16 are surplus, put first, not relaunched.
    let (p, plan) = plan_of(&e, "--compute SPX --memory NPS1");
    let c = &plan.sets[0];
    assert_eq!((c.before, c.after), (16, 8), "{c}");
    assert!(c.to_string().contains("the 8 surplus stop first"), "{c}");
    let surplus: Vec<&str> = plan.models[..8].iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        surplus,
        (9..=16)
            .map(|k| format!("mistral-12b#{k}"))
            .collect::<Vec<_>>()
    );
    assert!(plan.models[..8].iter().all(|m| m.to.is_empty()));
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
    members_answer(&e, 8);
    for port in &ports[8..] {
        assert!(get(*port, "/health").is_none(), "port {port} still answers");
    }
    let list = run(e.cmd().args(["models", "list"]), "");
    assert!(
        list.stdout.contains("set mistral-12b: 8/8 healthy"),
        "{}",
        list.stdout
    );
}
