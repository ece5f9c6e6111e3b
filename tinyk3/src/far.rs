//! The far tier's wire protocol and the engine's client for it.
//!
//! Frames are little-endian. Request: `K3F1`, kind (1 compute, 2 warm), then
//! compute = layer, d, n_vecs, vecs (n_vecs*d f32), n_items, items (vec, expert);
//! warm = n, n pairs (layer, expert). Response: `K3F1`, status (0 ok, 1 error),
//! then compute = n_items and per item a flag (1 + d f32 output, or 0 = missing);
//! warm = experts now warm; error = length + UTF-8 message (the server then
//! closes that connection and keeps serving others).
//!
//! The client never blocks a run on a broken tier: any failure marks the tier
//! unavailable with the reason and the engine computes everything locally.

use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde::Serialize;

use crate::tiers::ExpertId;

/// Frame magic and protocol version.
pub const MAGIC: &[u8; 4] = b"K3F1";
/// Largest batch of activation vectors in one request.
pub const MAX_VECS: u32 = 1024;
/// Largest number of (vector, expert) items in one request.
pub const MAX_ITEMS: u32 = 1 << 16;
/// Largest activation width accepted.
pub const MAX_D: u32 = 1 << 16;

/// A request to the expert server.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Compute experts of `layer` on `vecs`; `items` are (vector index, expert).
    Compute {
        layer: u32,
        d: u32,
        vecs: Vec<Vec<f32>>,
        items: Vec<(u32, u32)>,
    },
    /// Load these experts before answering, so the run measures a warmed tier.
    Warm { experts: Vec<(u32, u32)> },
}

/// A response from the expert server.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// One entry per item: the output, or `None` when the expert is not warm.
    Compute(Vec<Option<Vec<f32>>>),
    /// How many experts are warm after the request.
    Warm { warm: u32 },
    /// The request was malformed; the connection is closed after this.
    Error(String),
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed frame: {0}")]
    Malformed(String),
}

fn u32_le(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn floats(r: &mut impl Read, n: usize) -> std::io::Result<Vec<f32>> {
    let mut bytes = vec![0u8; n * 4];
    r.read_exact(&mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn magic(r: &mut impl Read) -> Result<(), ProtoError> {
    let mut m = [0u8; 4];
    r.read_exact(&mut m)?;
    if &m != MAGIC {
        return Err(ProtoError::Malformed(format!(
            "bad magic {m:?}, expected {MAGIC:?}"
        )));
    }
    Ok(())
}

fn limit(what: &str, v: u32, max: u32) -> Result<u32, ProtoError> {
    if v > max {
        return Err(ProtoError::Malformed(format!(
            "{what} {v} exceeds the limit {max}"
        )));
    }
    Ok(v)
}

/// Serialises a request into one buffer (written with a single syscall).
pub fn encode_request(req: &Request) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    match req {
        Request::Compute {
            layer,
            d,
            vecs,
            items,
        } => {
            b.push(1);
            for v in [*layer, *d, vecs.len() as u32] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            for v in vecs {
                b.extend_from_slice(crate::math::as_bytes(v));
            }
            b.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for (v, e) in items {
                b.extend_from_slice(&v.to_le_bytes());
                b.extend_from_slice(&e.to_le_bytes());
            }
        }
        Request::Warm { experts } => {
            b.push(2);
            b.extend_from_slice(&(experts.len() as u32).to_le_bytes());
            for (l, e) in experts {
                b.extend_from_slice(&l.to_le_bytes());
                b.extend_from_slice(&e.to_le_bytes());
            }
        }
    }
    b
}

/// Reads one request; `Malformed` means the bytes were not a valid request.
pub fn read_request(r: &mut impl Read) -> Result<Request, ProtoError> {
    magic(r)?;
    let mut kind = [0u8; 1];
    r.read_exact(&mut kind)?;
    match kind[0] {
        1 => {
            let layer = u32_le(r)?;
            let d = limit("d", u32_le(r)?, MAX_D)?;
            let n_vecs = limit("n_vecs", u32_le(r)?, MAX_VECS)?;
            let mut vecs = Vec::with_capacity(n_vecs as usize);
            for _ in 0..n_vecs {
                vecs.push(floats(r, d as usize)?);
            }
            let n_items = limit("n_items", u32_le(r)?, MAX_ITEMS)?;
            let mut items = Vec::with_capacity(n_items as usize);
            for _ in 0..n_items {
                let v = u32_le(r)?;
                if v >= n_vecs {
                    return Err(ProtoError::Malformed(format!(
                        "item names vector {v} of {n_vecs}"
                    )));
                }
                items.push((v, u32_le(r)?));
            }
            Ok(Request::Compute {
                layer,
                d,
                vecs,
                items,
            })
        }
        2 => {
            let n = limit("n", u32_le(r)?, MAX_ITEMS)?;
            let mut experts = Vec::with_capacity(n as usize);
            for _ in 0..n {
                experts.push((u32_le(r)?, u32_le(r)?));
            }
            Ok(Request::Warm { experts })
        }
        k => Err(ProtoError::Malformed(format!("unknown request kind {k}"))),
    }
}

/// Serialises a response.
pub fn encode_response(resp: &Response) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    match resp {
        Response::Compute(outs) => {
            b.push(0);
            b.extend_from_slice(&(outs.len() as u32).to_le_bytes());
            for o in outs {
                match o {
                    Some(v) => {
                        b.push(1);
                        b.extend_from_slice(crate::math::as_bytes(v));
                    }
                    None => b.push(0),
                }
            }
        }
        Response::Warm { warm } => {
            b.push(0);
            b.extend_from_slice(&warm.to_le_bytes());
        }
        Response::Error(msg) => {
            b.push(1);
            b.extend_from_slice(&(msg.len() as u32).to_le_bytes());
            b.extend_from_slice(msg.as_bytes());
        }
    }
    b
}

/// Reads a response to a compute request of `n_items` items of width `d`.
pub fn read_compute_response(
    r: &mut impl Read,
    n_items: usize,
    d: usize,
) -> Result<Response, ProtoError> {
    magic(r)?;
    let mut status = [0u8; 1];
    r.read_exact(&mut status)?;
    if status[0] == 1 {
        return read_error_body(r);
    }
    let n = u32_le(r)? as usize;
    if n != n_items {
        return Err(ProtoError::Malformed(format!(
            "{n} results for {n_items} items"
        )));
    }
    let mut outs = Vec::with_capacity(n);
    for _ in 0..n {
        let mut flag = [0u8; 1];
        r.read_exact(&mut flag)?;
        outs.push(if flag[0] == 1 {
            Some(floats(r, d)?)
        } else {
            None
        });
    }
    Ok(Response::Compute(outs))
}

/// Reads a response to a warm request.
pub fn read_warm_response(r: &mut impl Read) -> Result<Response, ProtoError> {
    magic(r)?;
    let mut status = [0u8; 1];
    r.read_exact(&mut status)?;
    if status[0] == 1 {
        return read_error_body(r);
    }
    Ok(Response::Warm { warm: u32_le(r)? })
}

fn read_error_body(r: &mut impl Read) -> Result<Response, ProtoError> {
    let n = limit("error length", u32_le(r)?, 1 << 16)? as usize;
    let mut msg = vec![0u8; n];
    r.read_exact(&mut msg)?;
    Ok(Response::Error(String::from_utf8_lossy(&msg).into_owned()))
}

/// The far tier as the bench reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FarStatus {
    pub configured: bool,
    pub available: bool,
    pub hits: u64,
    pub misses: u64,
    pub warm: u64,
    pub error: Option<String>,
}

/// The engine's connection to an expert server.
pub struct FarClient {
    stream: Option<(TcpStream, BufReader<TcpStream>)>,
    status: FarStatus,
}

/// How long a far request may take before the tier is declared dead.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

impl FarClient {
    /// Connects; failure leaves an unavailable tier that says why.
    pub fn connect(addr: &str) -> FarClient {
        let mut client = FarClient {
            stream: None,
            status: FarStatus {
                configured: true,
                ..FarStatus::default()
            },
        };
        match Self::open(addr) {
            Ok(pair) => {
                client.stream = Some(pair);
                client.status.available = true;
            }
            Err(e) => {
                client.status.error = Some(format!("cannot connect to expert server {addr}: {e}"))
            }
        }
        client
    }

    fn open(addr: &str) -> std::io::Result<(TcpStream, BufReader<TcpStream>)> {
        let sock = addr.to_socket_addrs()?.next().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "address resolves to nothing")
        })?;
        let stream = TcpStream::connect_timeout(&sock, Duration::from_secs(2))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let reader = BufReader::with_capacity(1 << 16, stream.try_clone()?);
        Ok((stream, reader))
    }

    /// Whether requests can be sent.
    pub fn available(&self) -> bool {
        self.stream.is_some()
    }

    /// What the bench reports about the tier.
    pub fn status(&self) -> &FarStatus {
        &self.status
    }

    /// Counts one expert answered by the tier.
    pub fn count(&mut self, hit: bool) {
        if hit {
            self.status.hits += 1;
        } else {
            self.status.misses += 1;
        }
    }

    /// Marks the tier dead for the rest of the run, keeping the first reason.
    pub fn fail(&mut self, why: String) {
        self.stream = None;
        self.status.available = false;
        self.status.error.get_or_insert(why);
    }

    /// Asks the server to hold `experts` warm; returns how many are warm.
    pub fn warm(&mut self, experts: &[ExpertId]) -> Option<u32> {
        let req = Request::Warm {
            experts: experts.iter().map(|&(l, e)| (l as u32, e as u32)).collect(),
        };
        let (w, r) = self.stream.as_mut()?;
        let result = w
            .write_all(&encode_request(&req))
            .map_err(ProtoError::from)
            .and_then(|_| read_warm_response(r));
        match result {
            Ok(Response::Warm { warm }) => {
                self.status.warm = warm as u64;
                Some(warm)
            }
            Ok(other) => {
                self.fail(format!("expert server refused the warm request: {other:?}"));
                None
            }
            Err(e) => {
                self.fail(format!("expert server failed during warm-up: {e}"));
                None
            }
        }
    }

    /// Sends a compute request without waiting for the answer.
    pub fn send(&mut self, layer: usize, vecs: &[&[f32]], items: &[(usize, usize)]) -> bool {
        let req = Request::Compute {
            layer: layer as u32,
            d: vecs.first().map_or(0, |v| v.len() as u32),
            vecs: vecs.iter().map(|v| v.to_vec()).collect(),
            items: items.iter().map(|&(v, e)| (v as u32, e as u32)).collect(),
        };
        let Some((w, _)) = self.stream.as_mut() else {
            return false;
        };
        if let Err(e) = w.write_all(&encode_request(&req)) {
            self.fail(format!(
                "expert server connection lost while sending layer {layer}: {e}"
            ));
            return false;
        }
        true
    }

    /// Receives the answer to the last `send`; `None` if the tier died.
    pub fn recv(
        &mut self,
        layer: usize,
        n_items: usize,
        d: usize,
    ) -> Option<Vec<Option<Vec<f32>>>> {
        let (_, r) = self.stream.as_mut()?;
        match read_compute_response(r, n_items, d) {
            Ok(Response::Compute(outs)) => Some(outs),
            Ok(other) => {
                self.fail(format!("expert server refused layer {layer}: {other:?}"));
                None
            }
            Err(e) => {
                self.fail(format!(
                    "expert server connection lost at layer {layer}: {e}"
                ));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_and_malformed() {
        let req = Request::Compute {
            layer: 3,
            d: 2,
            vecs: vec![vec![1.0, -2.5]],
            items: vec![(0, 7), (0, 9)],
        };
        let bytes = encode_request(&req);
        assert_eq!(read_request(&mut bytes.as_slice()).unwrap(), req);
        let mut bad = bytes;
        bad[0] = b'X';
        assert!(matches!(
            read_request(&mut bad.as_slice()),
            Err(ProtoError::Malformed(_))
        ));
        let resp = Response::Compute(vec![Some(vec![0.5, 1.5]), None]);
        let got = read_compute_response(&mut encode_response(&resp).as_slice(), 2, 2).unwrap();
        assert_eq!(got, resp);
    }
}
