//! `tinyk3 expert-server`: the far tier, a separate process holding up to N experts in RAM.
//!
//! A compute request is answered at once from the warm set; experts that are not
//! warm come back `missing` and are queued for a background loader, so the engine
//! never waits for a cold load here. Outputs are computed with the engine's own
//! kernel ([`crate::math::gated_mlp`]), so they are bit-identical to local ones.
//! A malformed request gets an error frame and its connection is closed; the
//! server keeps serving everyone else.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use crate::aligned::AlignedBuf;
use crate::coldio::ColdReader;
use crate::error::{Error, Result};
use crate::far::{ProtoError, Request, Response, encode_response, read_request};
use crate::manifest::Manifest;
use crate::math::gated_mlp;
use crate::tiers::ExpertId;

/// The server's knobs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Most experts held in RAM at once.
    pub warm_capacity: usize,
    /// Fault injection for tests: exit abruptly, as if killed, on compute request N+1.
    pub exit_after_requests: Option<u64>,
}

/// The warm set: an LRU of experts.
struct Warm {
    map: HashMap<ExpertId, (Arc<AlignedBuf>, u64)>,
    order: BTreeMap<u64, ExpertId>,
    tick: u64,
    capacity: usize,
}

impl Warm {
    fn get(&mut self, id: ExpertId) -> Option<Arc<AlignedBuf>> {
        let (buf, stamp) = self.map.get_mut(&id)?;
        self.order.remove(stamp);
        self.tick += 1;
        *stamp = self.tick;
        self.order.insert(self.tick, id);
        Some(buf.clone())
    }

    fn insert(&mut self, id: ExpertId, buf: Arc<AlignedBuf>) {
        if self.capacity == 0 || self.map.contains_key(&id) {
            return;
        }
        while self.map.len() >= self.capacity {
            let (_, victim) = self.order.pop_first().expect("full implies non-empty");
            self.map.remove(&victim);
        }
        self.tick += 1;
        self.order.insert(self.tick, id);
        self.map.insert(id, (buf, self.tick));
    }
}

struct State {
    manifest: Manifest,
    reader: ColdReader,
    warm: Mutex<Warm>,
    queued: Mutex<HashSet<ExpertId>>,
    loader: Mutex<Sender<ExpertId>>,
    requests: AtomicU64,
    config: ServerConfig,
}

impl State {
    fn load(&self, (l, e): ExpertId) -> std::io::Result<AlignedBuf> {
        self.reader.read(
            self.manifest.expert_offset(l, e),
            self.manifest.experts.expert_bytes as usize,
        )
    }

    fn valid(&self, l: u32, e: u32) -> bool {
        (l as usize) < self.manifest.shape.n_layers && (e as usize) < self.manifest.shape.n_experts
    }
}

/// Binds `listen`, prints `listening on ADDR` to stdout, and serves until killed.
pub fn run(model_dir: &Path, listen: &str, config: ServerConfig) -> Result<()> {
    let manifest = Manifest::load(model_dir)?;
    let path = manifest.experts_path(model_dir);
    let reader = ColdReader::open(&path)
        .map_err(|e| Error::io(format!("cannot open experts {}", path.display()), e))?;
    let listener = TcpListener::bind(listen).map_err(|e| {
        Error::Usage(format!(
            "cannot listen on {listen}: {e}; pick a free host:port"
        ))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("cannot read the bound address", e))?;
    let (tx, rx) = channel();
    let state = Arc::new(State {
        warm: Mutex::new(Warm {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            capacity: config.warm_capacity,
        }),
        manifest,
        reader,
        queued: Mutex::new(HashSet::new()),
        loader: Mutex::new(tx),
        requests: AtomicU64::new(0),
        config,
    });
    {
        let state = state.clone();
        std::thread::spawn(move || background_loader(&state, rx));
    }
    println!("listening on {addr}");
    let _ = std::io::stdout().flush();
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let state = state.clone();
                std::thread::spawn(move || serve_connection(&state, stream));
            }
            Err(e) => eprintln!("expert-server: accept failed: {e}"),
        }
    }
    Ok(())
}

/// Puts the calling thread in the idle CPU and I/O classes.
///
/// Background warming is a favour to later tokens; on a shared machine it must
/// not take disk or CPU from a run that is waiting on reads right now.
fn lower_thread_priority() {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    // SAFETY: plain syscalls on the calling thread's id; failure only leaves the priority as is.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid);
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        );
    }
}

fn background_loader(state: &State, rx: Receiver<ExpertId>) {
    lower_thread_priority();
    for id in rx {
        let warm = state.warm.lock().expect("warm lock").map.contains_key(&id);
        if !warm {
            match state.load(id) {
                Ok(buf) => state
                    .warm
                    .lock()
                    .expect("warm lock")
                    .insert(id, Arc::new(buf)),
                Err(e) => eprintln!("expert-server: cannot load expert {id:?}: {e}"),
            }
        }
        state.queued.lock().expect("queue lock").remove(&id);
    }
}

fn serve_connection(state: &State, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(1 << 16, read_half);
    let mut writer = stream;
    loop {
        let response = match read_request(&mut reader) {
            Ok(req) => handle(state, req),
            Err(ProtoError::Io(_)) => return,
            Err(ProtoError::Malformed(why)) => {
                eprintln!("expert-server: malformed request: {why}");
                let _ = writer.write_all(&encode_response(&Response::Error(why)));
                return;
            }
        };
        let close = matches!(response, Response::Error(_));
        if writer.write_all(&encode_response(&response)).is_err() || close {
            return;
        }
    }
}

fn handle(state: &State, req: Request) -> Response {
    match req {
        Request::Warm { experts } => {
            if let Some(bad) = experts.iter().find(|(l, e)| !state.valid(*l, *e)) {
                return Response::Error(format!("expert {bad:?} is outside the model"));
            }
            for (l, e) in experts.iter().take(state.config.warm_capacity) {
                let id = (*l as usize, *e as usize);
                if state.warm.lock().expect("warm lock").map.contains_key(&id) {
                    continue;
                }
                match state.load(id) {
                    Ok(buf) => state
                        .warm
                        .lock()
                        .expect("warm lock")
                        .insert(id, Arc::new(buf)),
                    Err(err) => {
                        return Response::Error(format!("cannot load expert {id:?}: {err}"));
                    }
                }
            }
            Response::Warm {
                warm: state.warm.lock().expect("warm lock").map.len() as u32,
            }
        }
        Request::Compute {
            layer,
            d,
            vecs,
            items,
        } => {
            let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
            if state.config.exit_after_requests.is_some_and(|max| n > max) {
                eprintln!("expert-server: exiting abruptly on request {n} (--exit-after-requests)");
                std::process::exit(3);
            }
            let shape = &state.manifest.shape;
            if d as usize != shape.d_model {
                return Response::Error(format!(
                    "d = {d} but the model's d_model is {}",
                    shape.d_model
                ));
            }
            if let Some((_, e)) = items.iter().find(|(_, e)| !state.valid(layer, *e)) {
                return Response::Error(format!("expert ({layer}, {e}) is outside the model"));
            }
            compute(state, layer as usize, &vecs, &items)
        }
    }
}

fn compute(state: &State, layer: usize, vecs: &[Vec<f32>], items: &[(u32, u32)]) -> Response {
    let shape = &state.manifest.shape;
    let mut by_expert: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, (_, e)) in items.iter().enumerate() {
        by_expert.entry(*e as usize).or_default().push(i);
    }
    let mut outs: Vec<Option<Vec<f32>>> = vec![None; items.len()];
    for (e, idx) in by_expert {
        let id = (layer, e);
        let warm = state.warm.lock().expect("warm lock").get(id);
        match warm {
            Some(w) => {
                let xs: Vec<&[f32]> = idx
                    .iter()
                    .map(|&i| vecs[items[i].0 as usize].as_slice())
                    .collect();
                for (i, y) in idx
                    .iter()
                    .zip(gated_mlp(&w, shape.d_model, shape.d_expert, &xs))
                {
                    outs[*i] = Some(y);
                }
            }
            None if state.config.warm_capacity > 0
                && state.queued.lock().expect("queue lock").insert(id) =>
            {
                let _ = state.loader.lock().expect("loader lock").send(id);
            }
            None => {}
        }
    }
    Response::Compute(outs)
}
