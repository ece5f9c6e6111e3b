//! Which stack a ledger handle writes for (issue #18: many daemons, one
//! database). A daemon's handle is scoped to its `[stack] name` and
//! `class`: the cycles it opens carry them, the stages it stages inherit
//! the stack of their cycle, and its recovery at start aborts only its own
//! running cycles. An unscoped handle (the CLI, tests, benches) writes rows
//! with no stack and sees every stack.

use std::sync::Arc;

use serde::Serialize;

use super::Conn;
use super::error::Ctx;
use super::{Ledger, Result};

/// A stack's name and hardware class, as its config names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackScope {
    /// `[stack] name`, unique in a fleet.
    pub name: String,
    /// `[stack] class`: hosts of one hardware model; `None` when unnamed.
    pub class: Option<String>,
}

/// How many rows [`Ledger::adopt_unowned`] gave the scope's stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Adopted {
    pub cycles: u64,
    pub stages: u64,
}

impl Ctx {
    /// The scope's stack name, bound as a nullable text parameter.
    pub(crate) fn stack(&self) -> Option<&str> {
        self.scope.as_deref().map(|s| s.name.as_str())
    }

    pub(crate) fn class(&self) -> Option<&str> {
        self.scope.as_deref().and_then(|s| s.class.as_deref())
    }
}

/// Rows from before stacks were recorded (migration 20261201210001) belong
/// to the stack that ran them, the only one such a ledger knew.
async fn adopt(c: Conn<'_>, cx: &Ctx) -> Result<Adopted> {
    on_db!(c, |c| {
        let op = "give rows written before stacks were recorded to this stack";
        let cycles = sqlx::query("UPDATE cycles SET stack = $1, class = $2 WHERE stack IS NULL")
            .bind(cx.stack())
            .bind(cx.class())
            .execute(&mut *c)
            .await
            .map_err(cx.err(op))?
            .rows_affected();
        let stages = sqlx::query("UPDATE stages SET stack = $1 WHERE stack IS NULL")
            .bind(cx.stack())
            .execute(&mut *c)
            .await
            .map_err(cx.err(op))?
            .rows_affected();
        Ok(Adopted { cycles, stages })
    })
}

impl Ledger {
    /// This handle, writing for `scope`'s stack from now on (see the module
    /// comment). Clones share the pool.
    pub fn scoped(mut self, scope: StackScope) -> Ledger {
        self.ctx.scope = Some(Arc::new(scope));
        self
    }

    /// The stack this handle writes for, if scoped.
    pub fn scope(&self) -> Option<&StackScope> {
        self.ctx.scope.as_deref()
    }

    /// Gives the rows that carry no stack (written before stacks were
    /// recorded) to this handle's stack; a no-op on an unscoped handle and
    /// on a ledger that has none.
    pub async fn adopt_unowned(&self) -> Result<Adopted> {
        if self.ctx.scope.is_none() {
            return Ok(Adopted::default());
        }
        let mut tx = self.begin_write().await?;
        let (c, cx) = tx.parts();
        let adopted = adopt(c, cx).await?;
        tx.commit().await?;
        Ok(adopted)
    }
}
