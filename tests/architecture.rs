//! The layering rule, enforced: the domain imports no I/O, async or terminal crate and no other
//! layer of partop.

#[test]
fn domain_depends_on_nothing() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/domain");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(concat!(env!("CARGO_MANIFEST_DIR"), "/src/domain.rs").into());
    let forbidden = [
        "tokio",
        "ratatui",
        "crossterm",
        "procfs",
        "nix::",
        "std::fs",
        "std::process",
        "std::net",
        "crate::collect",
        "crate::sim",
        "crate::ui",
        "crate::commands",
        "tiny_http",
    ];
    for f in files {
        let text: String = std::fs::read_to_string(&f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for bad in forbidden {
            assert!(
                !text.contains(bad),
                "{} uses {bad}: the domain must stay pure",
                f.display()
            );
        }
    }
}
