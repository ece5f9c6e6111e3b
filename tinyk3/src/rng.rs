//! A small, fast, seeded PRNG (SplitMix64 seeding a xoshiro256++ stream) for weights.
//!
//! Every tensor gets its own stream derived from (seed, tensor id), so checkpoint
//! bytes do not depend on generation order or on how many threads wrote them.

/// A xoshiro256++ generator.
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A stream for `(seed, stream)`; distinct streams are independent for our purposes.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut st = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let s = [
            splitmix(&mut st),
            splitmix(&mut st),
            splitmix(&mut st),
            splitmix(&mut st),
        ];
        Rng { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = (self.s[0].wrapping_add(self.s[3]))
            .rotate_left(23)
            .wrapping_add(self.s[0]);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform f64 in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Fills `out` with uniform values in [-scale, scale), two per 64-bit draw.
    pub fn fill_uniform(&mut self, out: &mut [f32], scale: f32) {
        // Mantissa trick: 23 random bits under exponent 0 give [1, 2) exactly.
        let to_unit = |bits: u32| f32::from_bits(0x3F80_0000 | (bits >> 9)) - 1.5;
        let two = 2.0 * scale;
        let mut chunks = out.chunks_exact_mut(2);
        for pair in &mut chunks {
            let r = self.next_u64();
            pair[0] = to_unit(r as u32) * two;
            pair[1] = to_unit((r >> 32) as u32) * two;
        }
        for v in chunks.into_remainder() {
            *v = to_unit(self.next_u64() as u32) * two;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_range() {
        let mut a = vec![0f32; 1001];
        let mut b = vec![0f32; 1001];
        Rng::new(7, 3).fill_uniform(&mut a, 0.5);
        Rng::new(7, 3).fill_uniform(&mut b, 0.5);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-0.5..0.5).contains(v)));
        let mut c = vec![0f32; 1001];
        Rng::new(7, 4).fill_uniform(&mut c, 0.5);
        assert_ne!(a, c);
    }
}
