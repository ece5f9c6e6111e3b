//! Every exit code: 2 usage, 4 expert failed to load, 1 runtime failure, 0 ok.

use crate::common::{run, tiny_model};

fn code_and_stderr(args: &[&str]) -> (i32, String) {
    let out = run(args);
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_exit_2_with_a_fix() {
    let (tmp, model) = tiny_model();
    let m = model.to_str().unwrap();
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1", "--bogus-flag"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--bogus-flag"));

    let missing = tmp.path().join("nope");
    let (code, err) = code_and_stderr(&["bench", missing.to_str().unwrap(), "--ids", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("tinyk3 init"), "{err}");

    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1", "--gen", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1", "--spec", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--incremental"), "{err}");
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1,x"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"x\""), "{err}");
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "999"]);
    assert_eq!(code, 2);
    assert!(err.contains("vocabulary"), "{err}");

    // A cache too small for top-k names the smallest that works, and that one works.
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1", "--cache-gb", "0.00001"]);
    assert_eq!(code, 2);
    let smallest = err
        .split("smallest cache that works is ")
        .nth(1)
        .expect(&err)
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let out = run(&[
        "bench",
        m,
        "--ids",
        "1",
        "--gen",
        "2",
        "--cache-gb",
        &smallest,
    ]);
    assert!(
        out.status.success(),
        "suggested cache {smallest} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A budget too small for trunk + cache + pins names the smallest that works, and that one works.
    let args = [
        "bench",
        m,
        "--ids",
        "1",
        "--gen",
        "2",
        "--cache-gb",
        "0.0001",
        "--trunk-gb",
        "0.00005",
        "--budget-gb",
        "0.0001",
    ];
    let (code, err) = code_and_stderr(&args);
    assert_eq!(code, 2);
    let smallest = err
        .split("smallest budget that works is ")
        .nth(1)
        .expect(&err)
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let mut ok = args.to_vec();
    ok[11] = &smallest;
    let out = run(&ok);
    assert!(
        out.status.success(),
        "suggested budget {smallest} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An unknown profile key is named.
    let profile = tmp.path().join("p.toml");
    std::fs::write(
        &profile,
        "[memory]\nbudget_gb = 1\ntrunk_gb = 0.1\ncache_gb = 0.1\nturbo = true\n",
    )
    .unwrap();
    let (code, err) = code_and_stderr(&[
        "bench",
        m,
        "--ids",
        "1",
        "--profile",
        profile.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("turbo"), "{err}");
}

#[test]
fn truncated_experts_exit_4_and_runtime_failures_exit_1() {
    let (tmp, model) = tiny_model();
    let m = model.to_str().unwrap();
    let bad_out = tmp.path().join("no-such-dir").join("out.json");
    let (code, err) = code_and_stderr(&[
        "bench",
        m,
        "--ids",
        "1",
        "--gen",
        "1",
        "--out",
        bad_out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--out"), "{err}");

    let trunk = model.join("trunk.bin");
    let len = std::fs::metadata(&trunk).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&trunk)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1", "--gen", "1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("trunk"), "{err}");

    let (_tmp2, model) = tiny_model();
    let m = model.to_str().unwrap();
    let experts = model.join("experts.bin");
    let len = std::fs::metadata(&experts).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&experts)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (code, err) = code_and_stderr(&["bench", m, "--ids", "1", "--gen", "1"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("failed to load"), "{err}");
}
