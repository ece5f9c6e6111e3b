//! SIGINT and SIGTERM: finish the current step, then stop.

use super::notify;
use crate::process::cancel::CancelHandle;

/// Cancels on the first SIGINT or SIGTERM.
pub(crate) async fn watch_signals(handle: CancelHandle) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::error!("cannot install the SIGINT/SIGTERM handlers; stop with SIGKILL only");
        return;
    };
    let name = tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    };
    tracing::warn!("{name}: finishing the current step and stopping");
    notify::stopping(&format!("stopping: {name}, finishing the current step"));
    handle.cancel();
}
