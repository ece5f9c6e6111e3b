//! The shutdown signal measurements listen to, so a SIGINT in the daemon
//! kills the running child's process group at once instead of after it ends.
//!
//! A thin wrapper over `tokio::sync::watch`: one [`CancelHandle`] (held by
//! whoever catches the signal) and any number of cloned [`Cancel`]s.

use tokio::sync::watch;

/// Fires a cancellation; every [`Cancel`] made from it sees it.
#[derive(Debug)]
pub struct CancelHandle(watch::Sender<bool>);

/// Listens for cancellation. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Cancel(watch::Receiver<bool>);

impl CancelHandle {
    /// Cancels every measurement listening; idempotent.
    pub fn cancel(&self) {
        self.0.send_replace(true);
    }

    /// Another listener.
    pub fn subscribe(&self) -> Cancel {
        Cancel(self.0.subscribe())
    }
}

impl Cancel {
    /// A new signal, not yet fired.
    pub fn new() -> (CancelHandle, Cancel) {
        let (tx, rx) = watch::channel(false);
        (CancelHandle(tx), Cancel(rx))
    }

    /// A signal that never fires (one-shot commands, tests).
    pub fn never() -> Cancel {
        // The sender is dropped at once: `cancelled` then pends forever.
        Cancel(watch::channel(false).1)
    }

    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when cancellation fires; never, if its handle is dropped
    /// without firing (nobody is left who could ask us to stop).
    pub async fn cancelled(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn fires_for_every_listener_and_never_fires_when_dropped() {
        let (handle, a) = Cancel::new();
        let b = handle.subscribe();
        assert!(!a.is_cancelled());
        handle.cancel();
        tokio::time::timeout(Duration::from_secs(1), a.cancelled())
            .await
            .unwrap();
        assert!(b.is_cancelled());
        let never = Cancel::never();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), never.cancelled())
                .await
                .is_err()
        );
    }
}
