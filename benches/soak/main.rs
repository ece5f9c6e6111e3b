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
mod table;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orchestrator::ledger::Ledger;

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
            "init_args = [\"--seed\", \"1\", \"--layers\", \"8\", \"--experts\", \"32\", \"--d-dense\", \"1536\"]",
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
        ("\"--gen\", \"8\"", "\"--gen\", \"8\"".into()),
        ("max_tokens = 8", "max_tokens = 8".into()),
        ("interval_s = 30", "interval_s = 0.001".into()),
        ("proposer = \"model\"", "proposer = \"bandit\"".into()),
        ("max_pairs = 16", "max_pairs = 8".into()),
        ("floor_pairs = 20", "floor_pairs = 10".into()),
        // A hang fault costs this much; a healthy tiny run takes < 1 s.
        ("run_timeout_s = 1800", "run_timeout_s = 10".into()),
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
    table::print(&args, &costs, &rss, &sizes, wall);
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
