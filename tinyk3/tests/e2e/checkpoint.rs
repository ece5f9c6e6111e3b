//! Checkpoint determinism: same seed, same bytes and digest; another seed differs.

use crate::common::init_tiny;

fn digest(dir: &std::path::Path) -> String {
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    m["digest"].as_str().unwrap().to_string()
}

#[test]
fn same_seed_gives_same_bytes_and_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    init_tiny(&a, 11);
    init_tiny(&b, 11);
    init_tiny(&c, 12);
    for f in ["manifest.json", "trunk.bin", "experts.bin"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs for one seed"
        );
    }
    assert_eq!(digest(&a), digest(&b));
    assert_ne!(digest(&a), digest(&c));
    assert_ne!(
        std::fs::read(a.join("experts.bin")).unwrap(),
        std::fs::read(c.join("experts.bin")).unwrap()
    );
    // Experts are aligned for direct I/O.
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["experts"]["stride"].as_u64().unwrap() % 4096, 0);
    assert_eq!(
        m["experts"]["bytes"].as_u64().unwrap(),
        4 * 8 * m["experts"]["stride"].as_u64().unwrap()
    );
}
