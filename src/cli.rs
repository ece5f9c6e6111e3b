//! The command line, as clap derive types. Handlers live in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "orchestrator",
    version,
    about = "Tunes a tiered mixture-of-experts serving stack by measured, human-approved experiments"
)]
pub struct Cli {
    /// The configuration file [default: $ORCHESTRATOR_CONFIG, else ./config.toml]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Log filter for stderr (e.g. info, debug, orchestrator=trace)
    #[arg(long, global = true, default_value = "info", value_name = "FILTER")]
    pub log: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the loop: observe, propose, measure, judge, record, stage
    Run(RunArgs),
    /// Validate the config, the menu and the live profile; probe the endpoints
    Check,
    /// Inspect and decide staged wins
    #[command(subcommand)]
    Stage(StageCommand),
    /// Recent cycles with their verdicts; `--check` verifies the ledger's invariants
    Ledger(LedgerArgs),
    /// Re-pin the reference output hash of the live profile, on purpose
    Rebaseline(RebaselineArgs),
    /// A weekly report from the ledger (Markdown or self-contained HTML)
    Report(ReportArgs),
    /// Run one profile back to back and write each run as a CSV row (an A/A trace for the judge's replay)
    Trace(TraceArgs),
    /// Judge a profile against the live one (or --base) as a staged win is
    /// judged: the noise floor, the A/B and, for a win, its confirmation.
    /// Recorded as a manual experiment; never staged, the live profile
    /// never touched
    Compare(CompareArgs),
}

#[derive(Debug, Subcommand)]
pub enum StageCommand {
    /// Staged wins (every state with --all)
    List {
        /// Show approved, rejected and expired stages too
        #[arg(long)]
        all: bool,
        /// Print JSON instead of a table (the effect as `effect_percent` and `effect_log_ratio`)
        #[arg(long)]
        json: bool,
        /// Only the stages of this stack (its `[stack] name`) [default: every stack's]
        #[arg(long, value_name = "NAME")]
        stack: Option<String>,
    },
    /// The profile diff against the live profile, the evidence, and the
    /// command line that runs the stack with the staged profile
    Show {
        /// The stage id (from `stage list`)
        id: i64,
        /// Print JSON (the stage, its runs and verdicts, the diff against the live profile)
        #[arg(long)]
        json: bool,
    },
    /// Approve a staged win: on SQLite, write the staged profile to the live
    /// profile path; on PostgreSQL, record the approval for the stack's
    /// daemon to write on its host. Prints the command line to restart the
    /// stack with (the restart is yours), or runs `[stack] restart` with
    /// --restart
    Approve {
        /// The stage id (from `stage list`)
        id: i64,
        /// Who approves [default: $USER, else the login name, else this user's passwd name]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// A note recorded with the approval
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// Approve it for every host of its stack's `[stack] class` (a
        /// shared PostgreSQL ledger): each daemon of the class whose live
        /// profile is the stage's base applies it to its own
        #[arg(long)]
        class: bool,
        /// After writing the live profile, run `[stack] restart` and wait
        /// (bounded by `[stack] restart_timeout_s`) until the live server
        /// answers its health path (SQLite ledgers: the CLI writes the file)
        #[arg(long, conflicts_with = "class")]
        restart: bool,
    },
    /// Refuse a staged win
    Reject {
        /// The stage id (from `stage list`)
        id: i64,
        /// Why the stage is refused (recorded with the decision)
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Who rejects [default: $USER, else the login name, else this user's passwd name]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Put back the profile an approved, applied stage replaced: refused
    /// when the live profile is no longer the stage's. Expires the staged
    /// wins measured on top of the reverted profile. On PostgreSQL the
    /// stack's daemon writes it on its host
    Revert {
        /// The stage id (from `stage list --all`)
        id: i64,
        /// Why it is reverted (recorded with who asked)
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Who reverts [default: $USER, else the login name, else this user's passwd name]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// After writing the live profile, run `[stack] restart` and wait
        /// for the live server's health path (SQLite ledgers)
        #[arg(long)]
        restart: bool,
    },
}

#[derive(Debug, Args)]
pub struct LedgerArgs {
    /// How many recent cycles
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Verify the ledger instead of listing it: exit 0 when consistent, 1
    /// with every violation listed
    #[arg(long)]
    pub check: bool,
    /// List only the cycles of this stack (`[stack] name`) of a shared ledger
    #[arg(long, value_name = "NAME", conflicts_with = "check")]
    pub stack: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The ISO week to report, e.g. 2026-W48 [default, with no period given:
    /// the seven days up to today]
    #[arg(long, value_name = "YYYY-Www", conflicts_with_all = ["since", "until"])]
    pub week: Option<String>,
    /// First day included [default with --until: six days before it]
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub since: Option<String>,
    /// Last day included [default with --since: today]
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub until: Option<String>,
    /// Markdown, or one self-contained HTML page with inline SVG charts
    #[arg(long, value_enum, default_value_t = ReportFormat::Md)]
    pub format: ReportFormat,
    /// Write the report to FILE instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Report this stack of a fleet's ledger, then the fleet summary
    /// [default, with none of --stack/--class/--all: the config's own
    /// `[stack] name`, without the summary]
    #[arg(long, value_name = "NAME", group = "stacks")]
    pub stack: Option<String>,
    /// Report every stack whose latest cycle ran as this `[stack] class`,
    /// then the fleet summary
    #[arg(long, value_name = "NAME", group = "stacks")]
    pub class: Option<String>,
    /// Report every stack in the ledger, then the fleet summary
    #[arg(long, group = "stacks")]
    pub all: bool,
}

impl ReportArgs {
    /// Which stacks: at most one of the three flags (clap refuses two).
    pub fn selection(&self) -> crate::report::fleet::Selection {
        use crate::report::fleet::Selection;
        match (&self.stack, &self.class, self.all) {
            (Some(s), _, _) => Selection::Stack(s.clone()),
            (_, Some(c), _) => Selection::Class(c.clone()),
            (_, _, true) => Selection::All,
            _ => Selection::Own,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Md,
    Html,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: with --cycles or --once, 1 when the last cycle failed, or when \
every cycle that ran to its end failed (a cycle cut short by SIGINT/SIGTERM is `aborted`, neither \
failed nor a success), else 0; without a bound, 0 when stopped by SIGINT/SIGTERM; always 2 for a \
configuration or usage error and 1 when the ledger cannot be written."
)]
pub struct RunArgs {
    /// Stop after N cycles, or sooner when the loop is converged or over its engine budget (a bounded run never waits) [default: run until SIGINT/SIGTERM, waiting while converged or over budget]
    #[arg(long, value_name = "N", conflicts_with = "once")]
    pub cycles: Option<u64>,
    /// Run one cycle (exit 1 if it failed); none, saying why, when the loop is converged or over its engine budget
    #[arg(long)]
    pub once: bool,
}

#[derive(Debug, Args)]
pub struct RebaselineArgs {
    /// Why the output changed (recorded with the new reference)
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Who re-pins [default: $USER, else the login name, else this user's passwd name]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// How many runs
    #[arg(long, value_name = "N")]
    pub runs: u64,
    /// The CSV file to write (never overwritten)
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Measure through the bench command or the live serving surface
    #[arg(long, value_enum, default_value_t = TraceProtocol::Bench)]
    pub protocol: TraceProtocol,
    /// The profile to run [default: the live profile]
    #[arg(long, value_name = "PATH")]
    pub profile: Option<PathBuf>,
    /// A progress line on stderr every N runs (0: none)
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub progress_every: u64,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the comparison was judged, whatever the verdict \
(win, loss, within_noise, inconclusive, hash_mismatch: read it from the output); 1 when it could \
not be measured (the stack is down, a run failed, SIGINT/SIGTERM), recorded as `failed`; 2 for a \
usage or configuration error (a missing or unparseable profile), with nothing measured."
)]
pub struct CompareArgs {
    /// The profile to judge (a TOML profile, as the live one)
    #[arg(long, value_name = "PATH")]
    pub candidate: PathBuf,
    /// The profile to judge it against [default: the live profile]
    #[arg(long, value_name = "PATH")]
    pub base: Option<PathBuf>,
    /// Print JSON: the verdict, the effect and its interval, each A/B's floor and runs
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceProtocol {
    Bench,
    Surface,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every option and argument of every subcommand, as `(path, id)`,
    /// without help text.
    fn undocumented(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "version"].contains(&id) {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_about().is_none() {
                out.push(format!("{path} {} (the subcommand)", sub.get_name()));
            }
            undocumented(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    /// `docs/cli.md` as clap renders it: every command's `--help`, in the
    /// order `orchestrator help` lists them, depth first.
    fn cli_reference() -> String {
        fn pages(cmd: &mut clap::Command, path: &str, out: &mut String) {
            let help = cmd.render_help().to_string();
            let help: Vec<&str> = help.lines().map(str::trim_end).collect();
            out.push_str(&format!(
                "\n## `{path}`\n\n```text\n{}\n```\n",
                help.join("\n").trim_end()
            ));
            for sub in cmd.get_subcommands_mut() {
                if sub.get_name() != "help" {
                    let name = format!("{path} {}", sub.get_name());
                    pages(sub, &name, out);
                }
            }
        }
        let mut cmd = Cli::command().bin_name("orchestrator");
        cmd.build();
        let mut out = String::from(
            "# Command-line reference\n\n\
             Each command's `--help`, generated from the clap types in `src/cli.rs` \
             by the test `cli::tests::docs_cli_md_is_generated_from_clap`, which \
             fails when this file drifts from them. Regenerate it after changing \
             the command line:\n\n\
             ```sh\nUPDATE_DOCS=1 cargo test --lib cli::tests\n```\n",
        );
        pages(&mut cmd, "orchestrator", &mut out);
        out
    }

    #[test]
    fn docs_cli_md_is_generated_from_clap() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
        let want = cli_reference();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/cli.md differs from the command line in src/cli.rs; regenerate it with \
             `UPDATE_DOCS=1 cargo test --lib cli::tests` and commit it"
        );
    }

    #[test]
    fn every_option_argument_and_subcommand_has_help() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        undocumented(&cmd, "orchestrator", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:#?}");
    }
}
