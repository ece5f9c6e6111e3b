//! Every command that takes `--stack NAME` answers a name the ledger does
//! not know the same way: exit 2, naming the stacks it does know. The
//! config's own stack is known even before its first cycle.

use crate::report_fixture::Site;
use assert_cmd::Command;
use predicates::prelude::*;

fn orchestrator(site: &Site, args: &[&str]) -> assert_cmd::assert::Assert {
    Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(site.config_path())
        .args(args)
        .assert()
}

#[test]
fn ledger_stage_list_and_report_refuse_an_unknown_stack_alike() {
    let site = Site::new(true);
    for args in [
        &["ledger", "--stack", "nosuch"][..],
        &["stage", "list", "--stack", "nosuch"],
        &["stage", "list", "--all", "--stack", "nosuch"],
        &["report", "--stack", "nosuch"],
    ] {
        orchestrator(&site, args)
            .code(2)
            .stderr(predicate::str::contains(
                "--stack nosuch: no stack of that name ran a cycle in this ledger",
            ))
            .stderr(predicate::str::contains("tinyk3"));
    }
    for args in [
        &["ledger", "--stack", "tinyk3"][..],
        &["stage", "list", "--stack", "tinyk3"],
    ] {
        orchestrator(&site, args).success();
    }
}

#[test]
fn the_configs_own_stack_is_known_before_its_first_cycle() {
    let site = Site::new(false);
    orchestrator(&site, &["ledger", "--stack", "tinyk3"])
        .success()
        .stdout(predicate::str::contains("no cycles of stack `tinyk3`"));
    orchestrator(&site, &["stage", "list", "--stack", "tinyk3"]).success();
    orchestrator(&site, &["ledger", "--stack", " "])
        .code(2)
        .stderr(predicate::str::contains("--stack needs a stack's name"));
}
