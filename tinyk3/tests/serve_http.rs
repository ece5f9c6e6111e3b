//! End-to-end tests of `tinyk3 serve`: real HTTP against a real server process
//! on a free loopback port, serving a tiny checkpoint made by `tinyk3 init`.

mod serve_support;

#[path = "serve_http/api.rs"]
mod api;
#[path = "serve_http/lifecycle.rs"]
mod lifecycle;
#[path = "serve_http/schema.rs"]
mod schema;
