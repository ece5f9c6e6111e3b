//! Heat dump formats, and pin lists ranked from them.

use crate::common::{bench_ok, run, tiny_model};

#[test]
fn dump_cache_trace_writes_design_formats_and_ranks_pins() {
    let (tmp, model) = tiny_model();
    let dir = tmp.path().join("new").join("trace");
    let r = bench_ok(
        &model,
        &["--incremental", "--dump-cache-trace", dir.to_str().unwrap()],
    );
    let hist: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expert_hist.json")).unwrap())
            .unwrap();
    assert_eq!(hist["n_layers"], 4);
    assert_eq!(hist["n_experts"], 8);
    let counts = hist["counts"].as_object().unwrap();
    let total: u64 = counts.values().map(|v| v.as_u64().unwrap()).sum();
    let trace = std::fs::read(dir.join("expert_trace.bin")).unwrap();
    assert_eq!(trace.len() % 8, 0);
    let pairs: Vec<(i32, i32)> = trace
        .chunks_exact(8)
        .map(|c| {
            (
                i32::from_le_bytes(c[..4].try_into().unwrap()),
                i32::from_le_bytes(c[4..].try_into().unwrap()),
            )
        })
        .collect();
    assert_eq!(pairs.len() as u64, total);
    assert_eq!(r["expert_requests"].as_u64().unwrap(), total);
    // 4 prompt tokens + 12 generated, 4 layers, top-2 (the last generated token is never fed).
    assert_eq!(total, (4 + 11) * 4 * 2);
    assert_eq!(pairs[0].0, 0);
    for (l, e) in &pairs {
        assert!(counts.contains_key(&format!("{l},{e}")));
    }
    let pins = tmp.path().join("pins.txt");
    let out = run(&[
        "pins",
        model.to_str().unwrap(),
        "--hist",
        dir.join("expert_hist.json").to_str().unwrap(),
        "--out",
        pins.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&pins).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("K3EXPERTS 1 4 8 2"));
    let rows: Vec<u64> = lines
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(rows.iter().sum::<u64>(), total);
    assert!(
        rows.windows(2).all(|w| w[0] >= w[1]),
        "pin list is hottest first"
    );
}
