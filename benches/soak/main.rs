//! The soak benchmark (issue 6 Targets, issue 9 part 6): the real
//! `orchestrator run --cycles N` daemon against a fast tinyk3 stack, with
//! faults optionally sprinkled into the bench command at a seeded rate.
//!
//! ```sh
//! cargo build --release --workspace
//! nice cargo bench --bench soak -- --cycles 1000 [--fault-rate 0.02 --seed 1] [--keep DIR]
//! ```
//!
//! It writes a config (the repository's `config.toml` with temp paths, free
//! ports, the bandit proposer, a tiny checkpoint, a quick protocol and a 1 ms
//! interval) into a temp dir, starts the daemon (which makes the checkpoint
//! and starts `tinyk3 serve` and `tinyk3 expert-server` as its children),
//! samples the daemon's RSS from `/proc/PID/status` while it runs, and reads
//! the ledger as it grows and at the end. It prints:
//!
//! - the orchestrator's overhead per cycle: the cycle's wall time minus the
//!   recorded wall time of its engine runs (median, p95, max), both within a
//!   cycle (start → close) and start to start (which adds the loop's own
//!   bookkeeping between cycles);
//! - the daemon's RSS after the first cycle, at the end, the maximum and the
//!   slope of a least-squares line over the run;
//! - the ledger's bytes per cycle (a line through its size, WAL included, at
//!   twenty points), with R² and the largest residual;
//! - cycles per hour, the verdict mix, and the number of unclosed cycles.
//!
//! With `--fault-rate R`, the bench argv is wrapped in `fault-wrapper
//! --random R --seed S --state FILE --` (the test tree's fault injector,
//! built next to tinyk3), so a seeded share of engine runs crash, hang,
//! print garbage, change their output, exit 4 or die mid-run.

mod stats;

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orchestrator::ledger::{CycleCost, Ledger};
use orchestrator::vocab::CycleStatus;

/// The tiny checkpoint the daemon makes (`[embedded] init_args`): 4 layers of
/// 16 experts, top-2, so a bench run of a few tokens takes tens of ms.
const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
/// Bytes of one of its experts: 3 matrices of 64 x 128 f32.
const TINY_EXPERT_BYTES: u64 = 3 * 64 * 128 * 4;
/// The starting live profile: small cache, far tier attached, nothing pinned.
/// It names an empty pin list only so that `rerank_pins` knows the model's
/// top-k (the daemon takes it from the live pin list or the trace, and the
/// trace of this tiny model does not reveal it).
const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[pins]\nfile = \"start-pins.txt\"\ncount = 0\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";
/// That pin list: `K3EXPERTS 1 <layers> <experts> <topk>`, no rows.
const TINY_PINS: &str = "K3EXPERTS 1 4 16 2\n";
/// Ledger size points taken over the run.
const SIZE_POINTS: u64 = 20;

struct Args {
    cycles: u64,
    fault_rate: f64,
    seed: u64,
    keep: Option<PathBuf>,
    sample: Duration,
    /// Stop the daemon (SIGTERM: it records the current cycle `aborted`)
    /// after this long, and report on the cycles it finished.
    max_time: Option<Duration>,
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "soak: {problem}\nusage: cargo bench --bench soak -- [--cycles N] [--fault-rate R] [--seed S] [--keep DIR] [--sample-ms MS] [--max-minutes M]"
    );
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut a = Args {
        cycles: 1000,
        fault_rate: 0.0,
        seed: 1,
        keep: None,
        sample: Duration::from_millis(200),
        max_time: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` appends `--bench`; a filter word may come too.
        if flag == "--bench" || !flag.starts_with("--") {
            continue;
        }
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--cycles" => a.cycles = num(&flag, &value),
            "--fault-rate" => a.fault_rate = num(&flag, &value),
            "--seed" => a.seed = num(&flag, &value),
            "--sample-ms" => a.sample = Duration::from_millis(num(&flag, &value)),
            "--keep" => a.keep = Some(PathBuf::from(value)),
            "--max-minutes" => {
                a.max_time = Some(Duration::from_secs_f64(60.0 * num::<f64>(&flag, &value)))
            }
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    if a.cycles == 0 {
        usage("--cycles must be at least 1");
    }
    if !(0.0..=1.0).contains(&a.fault_rate) {
        usage("--fault-rate must lie in [0, 1]");
    }
    a
}

fn num<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| usage(&format!("{flag} {value}: not a valid number")))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A binary built next to the orchestrator (same target dir and profile).
fn sibling(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_orchestrator")).with_file_name(name);
    if !bin.is_file() {
        eprintln!(
            "soak: {} is missing; build the workspace first: cargo build --release --workspace",
            bin.display()
        );
        std::process::exit(2);
    }
    bin
}

/// The repository's default config, pointed at `dir`, free ports, the tiny
/// checkpoint, the bandit proposer and a quick protocol.
fn write_config(dir: &Path, args: &Args) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tinyk3 = sibling("tinyk3");
    let (serve, far, metrics) = (free_port(), free_port(), free_port());
    let bench_program = if args.fault_rate > 0.0 {
        format!(
            "{:?}, \"--random\", \"{}\", \"--seed\", \"{}\", \"--state\", {:?}, \"--\", {:?}",
            sibling("fault-wrapper"),
            args.fault_rate,
            args.seed,
            dir.join("fault-state"),
            tinyk3
        )
    } else {
        format!("{tinyk3:?}")
    };
    let base = std::fs::read_to_string(repo.join("config.toml")).expect("read config.toml");
    let replacements: &[(&str, String)] = &[
        (
            "\"target/release/tinyk3\", \"bench\"",
            format!("{bench_program}, \"bench\""),
        ),
        ("\"target/release/tinyk3\"", format!("{tinyk3:?}")),
        (
            "dir = \"experiments\"",
            format!("dir = {:?}", repo.join("experiments")),
        ),
        ("127.0.0.1:8181", format!("127.0.0.1:{serve}")),
        ("127.0.0.1:7070", format!("127.0.0.1:{far}")),
        ("127.0.0.1:9464", format!("127.0.0.1:{metrics}")),
        (
            "init_args = [\"--seed\", \"1\"]",
            format!("init_args = [{TINY_INIT}]"),
        ),
        (
            "starting_profile = \"tinyk3/profiles/slow-start.toml\"",
            "starting_profile = \"start.toml\"".into(),
        ),
        (
            "expert_bytes = 1572864",
            format!("expert_bytes = {TINY_EXPERT_BYTES}"),
        ),
        ("\"--gen\", \"24\"", "\"--gen\", \"8\"".into()),
        ("max_tokens = 24", "max_tokens = 8".into()),
        ("interval_s = 30", "interval_s = 0.001".into()),
        ("proposer = \"model\"", "proposer = \"bandit\"".into()),
        ("min_pairs = 6", "min_pairs = 4".into()),
        ("max_pairs = 50", "max_pairs = 8".into()),
        // A hang fault costs this much; a healthy tiny run takes < 1 s.
        ("run_timeout_s = 120", "run_timeout_s = 10".into()),
        (
            "memory_headroom_gb = 1.0",
            "memory_headroom_gb = 0.1".into(),
        ),
    ];
    let mut text = base;
    for (from, to) in replacements {
        assert!(
            text.contains(from),
            "config.toml no longer contains {from:?}; update benches/soak/main.rs"
        );
        text = text.replace(from, to);
    }
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write the config");
    std::fs::write(
        dir.join("start.toml"),
        TINY_START.replace("FAR", &format!("127.0.0.1:{far}")),
    )
    .expect("write the starting profile");
    // Relative paths in a profile are relative to the live profile's directory.
    let profiles = dir.join("ledger/profiles");
    std::fs::create_dir_all(&profiles).expect("create ledger/profiles");
    std::fs::write(profiles.join("start-pins.txt"), TINY_PINS).expect("write the pin list");
    path
}

/// One reading of the daemon's memory.
#[derive(Debug, Clone, Copy)]
struct RssSample {
    secs: f64,
    cycles: u64,
    rss_kb: u64,
    hwm_kb: u64,
    /// The daemon's own CPU time so far (user + system, all its threads).
    cpu_s: f64,
}

/// One reading of the ledger's size.
#[derive(Debug, Clone, Copy)]
struct SizeSample {
    cycles: u64,
    /// Pages as of the latest commit, WAL included (the size after a checkpoint).
    stored: u64,
    /// The main file plus the WAL file on disk, as they are.
    on_disk: u64,
}

/// The process's user + system CPU seconds (`/proc/PID/stat` fields 14
/// and 15), `None` once it is gone.
fn cpu_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after `(comm)`, which may hold spaces: state is field 3.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz.max(1) as f64)
}

/// `VmRSS` and `VmHWM` in kB, `None` once the process is gone.
fn memory_of(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Counts the daemon's `cycle ...` lines as its stdout file grows.
struct LineCounter {
    file: std::fs::File,
    pos: u64,
    partial: Vec<u8>,
    cycles: u64,
}

impl LineCounter {
    fn poll(&mut self) -> u64 {
        let mut buf = Vec::new();
        let read = self
            .file
            .seek(SeekFrom::Start(self.pos))
            .and_then(|_| self.file.read_to_end(&mut buf));
        if let Ok(n) = read {
            self.pos += n as u64;
            self.partial.extend_from_slice(&buf);
            while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=i).collect();
                if line.starts_with(b"cycle") {
                    self.cycles += 1;
                }
            }
        }
        self.cycles
    }
}

fn on_disk(db: &Path) -> u64 {
    let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    size(db.to_path_buf()) + size(PathBuf::from(format!("{}-wal", db.display())))
}

/// Starts the daemon; it gets SIGTERM should this harness die first.
fn start_daemon(dir: &Path, config: &Path, cycles: u64) -> Child {
    use std::os::unix::process::CommandExt;
    let stdout = std::fs::File::create(dir.join("daemon.stdout")).expect("stdout file");
    let stderr = std::fs::File::create(dir.join("daemon.stderr")).expect("stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    cmd.arg("--config")
        .arg(config)
        .args(["run", "--cycles", &cycles.to_string()])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("start orchestrator run")
}

fn main() {
    let args = parse_args();
    let temp = tempfile::tempdir().expect("a temp dir");
    let dir = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d).expect("create the --keep dir");
            std::path::absolute(d).expect("an absolute --keep dir")
        }
        None => temp.path().to_path_buf(),
    };
    let config = write_config(&dir, &args);
    let db = dir.join("ledger/orchestrator.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");

    eprintln!(
        "soak: {} cycles, fault rate {}, seed {}, in {}",
        args.cycles,
        args.fault_rate,
        args.seed,
        dir.display()
    );
    let t0 = Instant::now();
    let mut child = start_daemon(&dir, &config, args.cycles);
    let pid = child.id();
    let mut lines = LineCounter {
        file: std::fs::File::open(dir.join("daemon.stdout")).expect("open stdout"),
        pos: 0,
        partial: Vec::new(),
        cycles: 0,
    };
    let mut rss: Vec<RssSample> = Vec::new();
    let mut sizes: Vec<SizeSample> = Vec::new();
    let mut ledger: Option<Ledger> = None;
    let every = (args.cycles / SIZE_POINTS).max(1);
    let mut next_size = 1;
    let mut stopping = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the daemon") {
            break status;
        }
        let cycles = lines.poll();
        if let (Some((rss_kb, hwm_kb)), Some(cpu_s)) = (memory_of(pid), cpu_of(pid)) {
            rss.push(RssSample {
                secs: t0.elapsed().as_secs_f64(),
                cycles,
                rss_kb,
                hwm_kb,
                cpu_s,
            });
        }
        if !stopping && args.max_time.is_some_and(|m| t0.elapsed() >= m) {
            eprintln!(
                "soak: --max-minutes reached after {cycles} cycles; stopping the daemon (SIGTERM)"
            );
            // SAFETY: kill(2) has no memory effects; the child is not yet reaped.
            unsafe {
                libc::kill(i32::try_from(pid).expect("pid fits i32"), libc::SIGTERM);
            }
            stopping = true;
        }
        if cycles >= next_size {
            let l = match &ledger {
                Some(l) => l,
                None => ledger.insert(rt.block_on(Ledger::open(&db)).expect("open the ledger")),
            };
            let stored = rt.block_on(l.stored_bytes()).expect("ledger size");
            sizes.push(SizeSample {
                cycles,
                stored,
                on_disk: on_disk(&db),
            });
            let last = rss.last().map(|s| s.rss_kb).unwrap_or(0);
            eprintln!(
                "soak: {cycles}/{} cycles, {:.0} s, daemon RSS {:.1} MB, ledger {:.0} KB",
                args.cycles,
                t0.elapsed().as_secs_f64(),
                last as f64 / 1024.0,
                stored as f64 / 1024.0
            );
            next_size = (cycles / every + 1) * every;
        }
        std::thread::sleep(args.sample);
    };
    let wall = t0.elapsed();
    let done = lines.poll();
    if let Some(l) = ledger.take() {
        rt.block_on(l.close());
    }
    if !status.success() {
        let stderr = std::fs::read_to_string(dir.join("daemon.stderr")).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        eprintln!(
            "soak: the daemon exited with {status} after {done} cycles; its stderr ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        std::process::exit(1);
    }
    // The daemon closed its pool, which checkpoints the WAL into the file.
    let l = rt.block_on(Ledger::open(&db)).expect("open the ledger");
    let costs = rt.block_on(l.cycle_costs()).expect("read the cycles");
    let stored = rt.block_on(l.stored_bytes()).expect("ledger size");
    rt.block_on(l.close());
    sizes.push(SizeSample {
        cycles: costs.len() as u64,
        stored,
        on_disk: on_disk(&db),
    });
    print_table(&args, &costs, &rss, &sizes, wall);
    let errors = std::fs::read_to_string(dir.join("daemon.stderr"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ERROR"))
        .count();
    println!("\nERROR lines in the daemon's log: {errors}");
    if args.keep.is_some() {
        write_samples(&dir, &rss, &sizes);
        println!("kept: {} (config, ledger, logs, samples)", dir.display());
    }
}

fn write_samples(dir: &Path, rss: &[RssSample], sizes: &[SizeSample]) {
    let mut text = String::from("secs,cycles,rss_kb,hwm_kb,cpu_s\n");
    for s in rss {
        text += &format!(
            "{:.3},{},{},{},{:.2}\n",
            s.secs, s.cycles, s.rss_kb, s.hwm_kb, s.cpu_s
        );
    }
    std::fs::write(dir.join("rss.csv"), text).expect("write rss.csv");
    let mut text = String::from("cycles,stored_bytes,on_disk_bytes\n");
    for s in sizes {
        text += &format!("{},{},{}\n", s.cycles, s.stored, s.on_disk);
    }
    std::fs::write(dir.join("ledger_size.csv"), text).expect("write ledger_size.csv");
}

fn ms(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1} ms", v * 1e3))
        .unwrap_or_else(|| "-".into())
}

fn print_table(
    args: &Args,
    costs: &[CycleCost],
    rss: &[RssSample],
    sizes: &[SizeSample],
    wall: Duration,
) {
    let unclosed = costs.iter().filter(|c| c.ended_at.is_none()).count();
    // Overhead over the cycles that ran to their end (an `aborted` one was
    // cut short by --max-minutes).
    let closed: Vec<&CycleCost> = costs
        .iter()
        .filter(|c| c.ended_at.is_some() && c.status != CycleStatus::Aborted)
        .collect();
    let within_all: Vec<f64> = closed
        .iter()
        .filter_map(|c| {
            let wall = (c.ended_at? - c.started_at).as_seconds_f64();
            Some(wall - c.engine_s)
        })
        .collect();
    // The headline: cycles that measured (ran the engine at least once).
    let within: Vec<f64> = closed
        .iter()
        .filter(|c| c.runs > 0)
        .filter_map(|c| {
            let wall = (c.ended_at? - c.started_at).as_seconds_f64();
            Some(wall - c.engine_s)
        })
        .collect();
    let start_to_start: Vec<f64> = costs
        .windows(2)
        .map(|w| (w[1].started_at - w[0].started_at).as_seconds_f64() - w[0].engine_s)
        .collect();
    let engine: Vec<f64> = closed.iter().map(|c| c.engine_s).collect();
    // Per engine run, over the cycles that ran the engine.
    let per_run: Vec<f64> = closed
        .iter()
        .filter(|c| c.runs > 0)
        .filter_map(|c| {
            let wall = (c.ended_at? - c.started_at).as_seconds_f64();
            Some((wall - c.engine_s) / f64::from(c.runs))
        })
        .collect();
    let no_runs: Vec<f64> = closed
        .iter()
        .filter(|c| c.runs == 0)
        .filter_map(|c| Some((c.ended_at? - c.started_at).as_seconds_f64()))
        .collect();
    let runs: u64 = costs.iter().map(|c| u64::from(c.runs)).sum();
    let span = match (costs.first(), costs.last().and_then(|c| c.ended_at)) {
        (Some(first), Some(end)) => (end - first.started_at).as_seconds_f64(),
        _ => f64::NAN,
    };
    let mut verdicts: BTreeMap<&str, u64> = BTreeMap::new();
    for v in costs.iter().flat_map(|c| &c.verdicts) {
        *verdicts.entry(v.as_str()).or_default() += 1;
    }
    let mut statuses: BTreeMap<&str, u64> = BTreeMap::new();
    for c in costs {
        *statuses.entry(c.status.as_str()).or_default() += 1;
    }

    // RSS from the first completed cycle on (start-up maps the binary and
    // starts the runtime; that is not growth).
    let steady: Vec<&RssSample> = rss.iter().filter(|s| s.cycles >= 1).collect();
    let rss_start = steady.first().map(|s| s.rss_kb);
    let rss_end = steady.last().map(|s| s.rss_kb);
    let rss_max = rss.iter().map(|s| s.rss_kb).max();
    let hwm = rss.iter().map(|s| s.hwm_kb).max();
    // The daemon's own CPU per cycle, from the first finished cycle to the
    // last sample: unlike wall time, barely inflated by other load.
    let cpu_per_cycle = match (steady.first(), steady.last()) {
        (Some(a), Some(b)) if b.cycles > a.cycles => {
            Some((b.cpu_s - a.cpu_s) / (b.cycles - a.cycles) as f64)
        }
        _ => None,
    };
    // Per cycle k: the daemon's CPU from the end of cycle k-1 to the end of
    // cycle k (at the first sample that saw each end); `None` when both ends
    // fell between the same two samples.
    let cpu_at = |k: u64| {
        rss.iter()
            .find(|s| s.cycles >= k)
            .map(|s| (s.secs, s.cpu_s))
    };
    let cpu_measuring: Vec<f64> = costs
        .iter()
        .enumerate()
        .filter(|(_, c)| c.runs > 0 && c.status != CycleStatus::Aborted)
        .filter_map(|(i, _)| {
            let k = i as u64 + 1;
            let (a, b) = (cpu_at(k.saturating_sub(1))?, cpu_at(k)?);
            (b.0 > a.0 && k > 1).then_some(b.1 - a.1)
        })
        .collect();
    let slope = |from: u64| {
        let pts: Vec<(f64, f64)> = steady
            .iter()
            .filter(|s| s.cycles >= from)
            .map(|s| (s.cycles as f64, s.rss_kb as f64))
            .collect();
        stats::fit(&pts).map(|l| l.slope * 1000.0)
    };
    let n = costs.len() as u64;
    let slope_all = slope(1);
    let slope_late = slope(n / 2);
    let size_pts: Vec<(f64, f64)> = sizes
        .iter()
        .map(|s| (s.cycles as f64, s.stored as f64))
        .collect();
    let growth = stats::fit(&size_pts);
    let final_size = sizes.last().map(|s| s.stored).unwrap_or(0);
    let final_disk = sizes.last().map(|s| s.on_disk).unwrap_or(0);

    let kb = |x: Option<u64>| {
        x.map(|v| format!("{:.1} MB", v as f64 / 1024.0))
            .unwrap_or_else(|| "-".into())
    };
    let p50 = stats::quantile(&within, 0.5);
    let p95 = stats::quantile(&within, 0.95);
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    println!();
    println!(
        "soak: {} cycles (asked {}), fault rate {}, seed {}, bandit proposer, tiny tinyk3 checkpoint",
        n, args.cycles, args.fault_rate, args.seed
    );
    println!();
    println!("| measure | value | target |");
    println!("|---|---:|---|");
    println!(
        "| overhead per measuring cycle ({} cycles ran the engine), within the cycle: median / p95 / max | {} / {} / {} | < 50 ms: {} |",
        within.len(),
        ms(p50),
        ms(p95),
        ms(within.iter().copied().reduce(f64::max)),
        met(p50.is_some_and(|m| m < 0.05))
    );
    println!(
        "| overhead per cycle, all cycles: median / p95 / max | {} / {} / {} | |",
        ms(stats::quantile(&within_all, 0.5)),
        ms(stats::quantile(&within_all, 0.95)),
        ms(within_all.iter().copied().reduce(f64::max)),
    );
    println!(
        "| overhead per cycle, all cycles, start to start: median / p95 / max | {} / {} / {} | |",
        ms(stats::quantile(&start_to_start, 0.5)),
        ms(stats::quantile(&start_to_start, 0.95)),
        ms(start_to_start.iter().copied().reduce(f64::max)),
    );
    println!(
        "| overhead per engine run (cycles with runs): median / p95 | {} / {} | |",
        ms(stats::quantile(&per_run, 0.5)),
        ms(stats::quantile(&per_run, 0.95)),
    );
    println!(
        "| whole cycle without engine runs (refused proposals; {} cycles): median / p95 | {} / {} | |",
        no_runs.len(),
        ms(stats::quantile(&no_runs, 0.5)),
        ms(stats::quantile(&no_runs, 0.95)),
    );
    println!(
        "| daemon CPU time (user + sys) per cycle: mean over all / median over {} measuring cycles | {} / {} | |",
        cpu_measuring.len(),
        ms(cpu_per_cycle),
        ms(stats::quantile(&cpu_measuring, 0.5)),
    );
    println!(
        "| engine time per cycle: median / p95 ({} runs in all) | {} / {} | |",
        runs,
        ms(stats::quantile(&engine, 0.5)),
        ms(stats::quantile(&engine, 0.95)),
    );
    println!(
        "| daemon RSS: after cycle 1 / end / max (VmHWM) | {} / {} / {} ({}) | < 50 MB: {} |",
        kb(rss_start),
        kb(rss_end),
        kb(rss_max),
        kb(hwm),
        met(hwm.is_some_and(|h| h < 50 * 1024))
    );
    println!(
        "| RSS slope, KB per 1,000 cycles: all / second half | {} / {} | flat |",
        slope_all.map_or("-".into(), |s| format!("{s:+.0}")),
        slope_late.map_or("-".into(), |s| format!("{s:+.0}")),
    );
    match growth {
        Some(g) => println!(
            "| ledger bytes per cycle (line through {} points), R², largest residual | {:.0} B, {:.5}, {:.1} KB | linear |",
            sizes.len(),
            g.slope,
            g.r2,
            g.max_residual / 1024.0
        ),
        None => println!("| ledger bytes per cycle | too few points | linear |"),
    }
    println!(
        "| ledger at the end, after checkpoint (file + WAL on disk) | {:.0} KB ({:.0} KB) | |",
        final_size as f64 / 1024.0,
        final_disk as f64 / 1024.0
    );
    println!(
        "| cycles per hour (first start to last end; harness wall {:.0} s) | {:.0} | |",
        wall.as_secs_f64(),
        n as f64 / span * 3600.0
    );
    println!(
        "| cycle status mix | {} | |",
        statuses
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| verdict mix | {} | |",
        verdicts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| unclosed cycles | {unclosed} | 0: {} |",
        met(unclosed == 0)
    );
}
