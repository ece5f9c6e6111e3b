//! The bounded queue's admission: one generation runs, up to `--queue` wait,
//! and a request past that is turned away (429) instead of piling up.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::metrics::Live;

/// A place in the queue (or the running slot), given back when dropped.
#[derive(Debug)]
pub struct Ticket {
    live: Arc<Live>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.live.admitted.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Admits a request if fewer than `1 + queue` are running or waiting.
pub fn admit(live: &Arc<Live>, queue: usize) -> Option<Ticket> {
    let limit = 1 + queue as u64;
    live.admitted
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()
        .map(|_| {
            live.requests_total.fetch_add(1, Ordering::SeqCst);
            Ticket { live: live.clone() }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_and_frees_on_drop() {
        let live = Arc::new(Live::default());
        let a = admit(&live, 1).unwrap();
        let _b = admit(&live, 1).unwrap();
        assert!(admit(&live, 1).is_none());
        drop(a);
        assert!(admit(&live, 1).is_some());
        // Every admitted request counts once; a refused one does not.
        assert_eq!(live.requests_total.load(Ordering::SeqCst), 3);
    }
}
