//! `orchestrator report --stack | --class | --all` as a real process over a
//! two-class fleet in one ledger: the fixture week written by the config's
//! own stack before stacks were recorded (no stack on its rows), and again
//! by two scoped stacks of class `spark` and one of class `desk`.

use crate::report_fixture::{self, Site};
use assert_cmd::Command;
use orchestrator::ledger::{Ledger, StackScope};
use predicates::prelude::*;

/// The fixture site (own stack `tinyk3`, unowned rows), plus `box-a` and
/// `box-b` (`spark`) and `box-c` (`desk`, no parts of a token).
fn fleet_site() -> Site {
    let site = Site::new(true);
    let db = site.ledger_path();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let ledger = Ledger::open(&db).await.unwrap();
            for (name, class) in [("box-a", "spark"), ("box-b", "spark"), ("box-c", "desk")] {
                let scoped = ledger.clone().scoped(StackScope {
                    name: name.into(),
                    class: Some(class.into()),
                });
                if name == "box-c" {
                    report_fixture::fill_without_parts(&scoped).await;
                } else {
                    report_fixture::fill(&scoped).await;
                }
            }
            ledger.close().await;
        });
    site
}

fn report(site: &Site, args: &[&str]) -> assert_cmd::assert::Assert {
    Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(site.config_path())
        .args(["report", "--week", "2026-W47"])
        .args(args)
        .assert()
}

fn stdout(a: assert_cmd::assert::Assert) -> String {
    String::from_utf8(a.success().get_output().stdout.clone()).unwrap()
}

/// The stacks whose report the output holds, in order.
fn reported(md: &str) -> Vec<String> {
    md.lines()
        .filter_map(|l| l.strip_prefix("# Weekly report: "))
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect()
}

/// The summary row of `stack`, as its cells.
fn row(md: &str, stack: &str) -> Vec<String> {
    let summary = md
        .split("# Fleet summary: ")
        .nth(1)
        .expect("a fleet summary");
    let line = summary
        .lines()
        .find(|l| l.starts_with(&format!("| {stack} |")))
        .unwrap_or_else(|| panic!("no summary row for {stack}:\n{summary}"));
    line.trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn all_class_and_stack_report_their_stacks_and_sum_them_up() {
    let site = fleet_site();
    // No flag: the config's own stack only (its rows carry no stack), as
    // before fleets, and no summary.
    let own = stdout(report(&site, &[]));
    assert_eq!(reported(&own), vec!["tinyk3"]);
    assert!(!own.contains("Fleet summary"), "{own}");
    let cycles = own
        .lines()
        .find(|l| l.starts_with("- Cycles: "))
        .unwrap()
        .to_string();

    let all = stdout(report(&site, &["--all"]));
    assert_eq!(reported(&all), vec!["box-a", "box-b", "box-c", "tinyk3"]);
    // Each stack's report holds its own week, not the fleet's.
    assert_eq!(all.matches(cycles.as_str()).count(), 4, "{cycles}\n{all}");
    assert!(!all.contains(report_fixture::LEAKED_TOKEN));
    let a = row(&all, "box-a");
    assert_eq!(a[1], "spark");
    let n: u32 = cycles["- Cycles: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(a[2], n.to_string());
    assert_eq!(row(&all, "box-c")[1], "desk");
    // Legacy rows are the config's own stack, of no recorded class.
    assert_eq!(row(&all, "tinyk3")[1], "-");
    // Every stack staged and approved the same as the one-stack report says.
    let stages = own
        .lines()
        .find(|l| l.starts_with("Staged "))
        .unwrap()
        .to_string();
    let staged: String = stages["Staged ".len()..].split(' ').next().unwrap().into();
    let approved: String = stages
        .split("approved ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .into();
    for s in ["box-a", "box-b", "box-c", "tinyk3"] {
        let r = row(&all, s);
        assert_eq!((&r[3], &r[4]), (&staged, &approved), "{s}: {r:?}");
        assert!(r[5].parse::<f64>().is_ok(), "{s} has a live figure: {r:?}");
    }
    let total = all
        .lines()
        .find(|l| l.starts_with("| **total: 4 stack(s)** |"))
        .unwrap_or_else(|| panic!("no total line:\n{all}"));
    assert!(total.contains(&format!("| {} |", 4 * n)), "{total}");
    assert!(total.contains("of 4 measured at the objective"), "{total}");

    let spark = stdout(report(&site, &["--class", "spark"]));
    assert_eq!(reported(&spark), vec!["box-a", "box-b"]);
    assert!(spark.contains("| **total: 2 stack(s)** |"), "{spark}");

    let one = stdout(report(&site, &["--stack", "box-c"]));
    assert_eq!(reported(&one), vec!["box-c"]);
    assert_eq!(row(&one, "box-c")[2], n.to_string());
    // The config's own stack by name reads its unowned rows too.
    let mine = stdout(report(&site, &["--stack", "tinyk3"]));
    assert_eq!(row(&mine, "tinyk3")[2], n.to_string());

    let page = stdout(report(&site, &["--all", "--format", "html"]));
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("<!DOCTYPE html>").count(), 1);
    assert!(page.contains("<h1>Fleet summary: 2026-W47"), "no summary");
    for i in 0..4 {
        assert_eq!(
            page.matches(&format!("id=\"chart-speed-{i}\"")).count(),
            1,
            "one speed chart per stack"
        );
    }
    assert!(page.contains("<td>box-b</td><td>spark</td>"), "{page}");
}

#[test]
fn unknown_names_and_two_selections_exit_2_naming_the_fix() {
    let site = fleet_site();
    report(&site, &["--stack", "box-z"])
        .code(2)
        .stderr(predicate::str::contains("--stack box-z"))
        .stderr(predicate::str::contains(
            "(box-a, box-b, box-c, tinyk3) or use --all",
        ));
    report(&site, &["--class", "gpu"])
        .code(2)
        .stderr(predicate::str::contains("--class gpu"))
        .stderr(predicate::str::contains("(desk, spark) or use --all"));
    report(&site, &["--stack", "box-a", "--all"])
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
    report(&site, &["--class", "spark", "--stack", "box-a"])
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
}
