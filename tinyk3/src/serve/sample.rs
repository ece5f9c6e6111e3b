//! Choosing a token from logits: greedy at temperature 0, otherwise a seeded
//! draw from the softmax, in both cases only among the tokens a constraint allows.

use crate::math::argmax;
use crate::rng::Rng;

/// RNG stream of sampling (distinct from the checkpoint writer's streams).
const SAMPLING_STREAM: u64 = 0x5A3D_11E5;

/// How one request picks its tokens.
pub struct Sampler {
    temperature: f32,
    rng: Rng,
}

impl Sampler {
    /// Temperature 0 is greedy; above it, draws are reproducible from `seed`.
    pub fn new(temperature: f32, seed: u64) -> Sampler {
        Sampler {
            temperature,
            rng: Rng::new(seed, SAMPLING_STREAM),
        }
    }

    /// Picks from all of `logits`.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        if self.temperature <= 0.0 {
            return argmax(logits) as u32;
        }
        let ids: Vec<u32> = (0..logits.len() as u32).collect();
        self.draw(logits, &ids)
    }

    /// Picks among `allowed` token ids only (non-empty, each a valid index).
    pub fn pick_among(&mut self, logits: &[f32], allowed: &[u32]) -> u32 {
        if self.temperature <= 0.0 {
            // Ties go to the lowest id, as `argmax` does over the full vocabulary.
            let mut best = allowed[0];
            for &t in &allowed[1..] {
                if logits[t as usize].total_cmp(&logits[best as usize]).is_gt() {
                    best = t;
                }
            }
            return best;
        }
        self.draw(logits, allowed)
    }

    fn draw(&mut self, logits: &[f32], ids: &[u32]) -> u32 {
        let t = f64::from(self.temperature);
        let max = ids
            .iter()
            .map(|&i| f64::from(logits[i as usize]))
            .fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = ids
            .iter()
            .map(|&i| ((f64::from(logits[i as usize]) - max) / t).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut u = self.rng.next_f64() * total;
        for (&id, w) in ids.iter().zip(&weights) {
            if u < *w {
                return id;
            }
            u -= w;
        }
        *ids.last().expect("non-empty")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_respects_the_allowed_set_and_sampling_the_seed() {
        let logits = [0.0, 5.0, 1.0, 4.0];
        let mut g = Sampler::new(0.0, 1);
        assert_eq!(g.pick(&logits), 1);
        assert_eq!(g.pick_among(&logits, &[0, 2, 3]), 3);
        let draws = |seed| {
            let mut s = Sampler::new(1.0, seed);
            (0..32)
                .map(|_| s.pick_among(&logits, &[0, 2, 3]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(9), draws(9));
        assert!(draws(9).iter().all(|t| [0, 2, 3].contains(t)));
        assert!(
            draws(9)
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 1
        );
    }
}
