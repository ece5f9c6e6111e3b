//! Response bodies: a whole body, or a stream of server-sent events fed by a channel.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

/// The body of every response this server sends.
pub enum Body {
    Full(Option<Bytes>),
    /// Server-sent events, ended when the sender is dropped.
    Events(UnboundedReceiver<Bytes>),
}

impl Body {
    pub fn full(b: impl Into<Bytes>) -> Body {
        Body::Full(Some(b.into()))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Events(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Events(_) => SizeHint::default(),
        }
    }
}

/// One `data: {...}` event.
pub fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The event that ends an OpenAI stream.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}
