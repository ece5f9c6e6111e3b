//! f32 kernels with a fixed summation order, shared by the engine and the expert server.
//!
//! Every output element is computed by one call of [`dot`] on one thread, so how
//! work is split across threads (or processes) never changes a single bit.

#[cfg(not(target_endian = "little"))]
compile_error!("tinyk3 stores little-endian f32 and reads it in place");

/// Views f32s as their little-endian bytes.
pub fn as_bytes(floats: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and u8 has alignment 1; the length is exact.
    unsafe {
        std::slice::from_raw_parts(floats.as_ptr() as *const u8, std::mem::size_of_val(floats))
    }
}

/// Dot product with 16 interleaved partial sums combined in a fixed tree order.
///
/// Sixteen lanes keep four SSE add chains in flight, which is what hides the add
/// latency; the final tree is written out so the order never depends on the compiler.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; L];
    let mut ca = a.chunks_exact(L);
    let mut cb = b.chunks_exact(L);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..L {
            acc[j] += x[j] * y[j];
        }
    }
    let mut h = [0f32; 8];
    for j in 0..8 {
        h[j] = acc[j] + acc[j + 8];
    }
    let mut s = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

/// RMSNorm with gain `g`.
pub fn rmsnorm(x: &[f32], g: &[f32]) -> Vec<f32> {
    let ms = dot(x, x) / x.len() as f32;
    let inv = 1.0 / (ms + 1e-5).sqrt();
    x.iter().zip(g).map(|(v, g)| v * inv * g).collect()
}

/// SiLU activation.
#[inline]
pub fn silu(z: f32) -> f32 {
    z / (1.0 + (-z).exp())
}

/// Below this many multiply-adds a parallel split costs more than it saves.
const PAR_MIN_WORK: usize = 1 << 17;

/// `out[p][i] = dot(w[i], xs[p])` for a row-major `rows x cols` matrix, rows split across threads.
pub fn matvec_multi(
    w: &[f32],
    rows: usize,
    cols: usize,
    xs: &[&[f32]],
    threads: usize,
) -> Vec<Vec<f32>> {
    let mut out = vec![vec![0f32; rows]; xs.len()];
    let threads = if rows * cols * xs.len() < PAR_MIN_WORK {
        1
    } else {
        threads.max(1)
    };
    let per = rows.div_ceil(threads);
    // Each thread fills a contiguous row range of every position's output.
    let mut parts: Vec<Vec<Vec<f32>>> = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (lo, hi) = (t * per, ((t + 1) * per).min(rows));
                s.spawn(move || {
                    let mut part = vec![vec![0f32; hi.saturating_sub(lo)]; xs.len()];
                    for i in lo..hi {
                        let row = &w[i * cols..(i + 1) * cols];
                        for (p, x) in xs.iter().enumerate() {
                            part[p][i - lo] = dot(row, x);
                        }
                    }
                    part
                })
            })
            .collect();
        parts = handles
            .into_iter()
            .map(|h| h.join().expect("matvec worker"))
            .collect();
    });
    for (t, part) in parts.into_iter().enumerate() {
        let lo = t * per;
        for (p, vals) in part.into_iter().enumerate() {
            out[p][lo..lo + vals.len()].copy_from_slice(&vals);
        }
    }
    out
}

/// A gated MLP (`down(silu(gate x) * up x)`) on several inputs; the expert kernel.
///
/// `w` holds gate and up (`d_hidden x d_model`) then down (`d_model x d_hidden`).
/// Single-threaded on purpose: experts are the unit of parallelism, and the expert
/// server calls exactly this function, so a far output equals a local one bit for bit.
pub fn gated_mlp(w: &[f32], d_model: usize, d_hidden: usize, xs: &[&[f32]]) -> Vec<Vec<f32>> {
    let (gate, rest) = w.split_at(d_hidden * d_model);
    let (up, rest) = rest.split_at(d_hidden * d_model);
    let down = &rest[..d_model * d_hidden];
    let mut hs = vec![vec![0f32; d_hidden]; xs.len()];
    for j in 0..d_hidden {
        let (g, u) = (
            &gate[j * d_model..(j + 1) * d_model],
            &up[j * d_model..(j + 1) * d_model],
        );
        for (p, x) in xs.iter().enumerate() {
            hs[p][j] = silu(dot(g, x)) * dot(u, x);
        }
    }
    let mut out = vec![vec![0f32; d_model]; xs.len()];
    for i in 0..d_model {
        let row = &down[i * d_hidden..(i + 1) * d_hidden];
        for (p, h) in hs.iter().enumerate() {
            out[p][i] = dot(row, h);
        }
    }
    out
}

/// Index of the largest value; the lowest index wins ties.
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if x.total_cmp(&v[best]).is_gt() {
            best = i;
        }
    }
    best
}

/// Adds `b` into `a` element-wise.
pub fn add_into(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matvec_is_identical_across_thread_counts() {
        let (rows, cols) = (700, 264);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 997.0 - 0.5)
            .collect();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let one = matvec_multi(&w, rows, cols, &[&x], 1);
        let two = matvec_multi(&w, rows, cols, &[&x], 2);
        let three = matvec_multi(&w, rows, cols, &[&x, &x], 3);
        assert_eq!(one[0], two[0]);
        assert_eq!(one[0], three[1]);
        assert_eq!(one[0][5], dot(&w[5 * cols..6 * cols], &x));
    }

    #[test]
    fn argmax_prefers_lowest_index_on_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }
}
