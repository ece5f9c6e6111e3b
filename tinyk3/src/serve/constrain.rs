//! Schema-constrained decoding: which bytes may come next so that the answer
//! still completes to JSON that validates, within the token budget.
//!
//! The state is a set of cursors, each a stack of frames; every choice the
//! schema leaves open (an `anyOf` branch, an optional property, one more array
//! item, ending a number) forks a cursor, so a cursor's top frame is always a
//! literal, a string or a number being written. A byte is allowed when some
//! cursor accepts it and the shortest completion after it still fits the budget:
//! that is what makes every answer close within `max_tokens`.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::number::NumState;
use super::schema::{Grammar, Node, NodeId};

#[derive(Debug, Clone)]
enum Frame {
    /// A value still to be expanded.
    Value(NodeId),
    /// Exact bytes still to write.
    Lit(Arc<[u8]>, usize),
    /// Inside an object: the next property index, and whether one was written.
    Obj {
        node: NodeId,
        next: usize,
        written: bool,
    },
    /// Inside an array: items written so far.
    Arr {
        node: NodeId,
        count: usize,
    },
    /// Inside a free object or array: members written so far.
    FreeObj {
        count: usize,
    },
    FreeArr {
        count: usize,
    },
    /// Inside a string's quotes: characters written.
    Str {
        node: NodeId,
        len: usize,
    },
    /// A number being written.
    Num {
        node: NodeId,
        st: NumState,
    },
}

type Cursor = Vec<Frame>;

fn lit(bytes: &[u8]) -> Frame {
    Frame::Lit(Arc::from(bytes), 0)
}

/// Printable ASCII other than `"` and `\`: string content that needs no escaping.
fn plain_char(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'
}

/// The bytes the decoder may choose next, and whether it may stop here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choices {
    pub bytes: Vec<u8>,
    /// The answer is complete; it could also go on (a top-level number), so
    /// ending is itself a choice the model makes (by picking [`END_BYTE`]).
    pub may_end: bool,
}

/// The byte whose logit stands for "end here" when the answer could also go on.
/// A newline is JSON whitespace, so it is never part of the value itself.
pub const END_BYTE: u8 = b'\n';

/// The decoding state for one answer.
#[derive(Debug, Clone)]
pub struct Constraint {
    g: Arc<Grammar>,
    cursors: Vec<Cursor>,
}

impl Constraint {
    /// The state before the first byte.
    pub fn new(g: Arc<Grammar>) -> Constraint {
        let mut cursors = Vec::new();
        expand(&g, vec![Frame::Value(g.root)], &mut cursors);
        Constraint { g, cursors }
    }

    /// The shortest number of bytes that completes the answer.
    pub fn min_remaining(&self) -> usize {
        self.cursors
            .iter()
            .map(|c| cursor_min(&self.g, c))
            .min()
            .unwrap_or(0)
    }

    /// Is the text so far a complete, valid answer?
    pub fn is_complete(&self) -> bool {
        self.cursors.iter().any(|c| c.is_empty())
    }

    /// Can the answer go on?
    pub fn can_continue(&self) -> bool {
        self.cursors.iter().any(|c| !c.is_empty())
    }

    fn after(&self, byte: u8) -> Vec<Cursor> {
        let mut out = Vec::new();
        for c in &self.cursors {
            if let Some(next) = step(&self.g, c, byte) {
                expand(&self.g, next, &mut out);
            }
        }
        out
    }

    /// The bytes that keep the answer valid and completable within `budget`
    /// more tokens (counting the byte itself).
    pub fn choices(&self, budget: usize) -> Choices {
        let mut candidates = [false; 256];
        for c in &self.cursors {
            for b in top_bytes(&self.g, c) {
                candidates[b as usize] = true;
            }
        }
        let mut bytes = Vec::new();
        for b in 0..=255u8 {
            if candidates[b as usize] {
                let next = self.after(b);
                let need = next.iter().map(|c| cursor_min(&self.g, c)).min();
                if need.is_some_and(|n| n < budget) {
                    bytes.push(b);
                }
            }
        }
        Choices {
            bytes,
            may_end: self.is_complete() && self.can_continue(),
        }
    }

    /// Takes `byte`, which must be one of [`Constraint::choices`].
    pub fn advance(&mut self, byte: u8) {
        self.cursors = self.after(byte);
        debug_assert!(
            !self.cursors.is_empty(),
            "advanced by a byte that was not allowed"
        );
    }
}

/// The bytes a cursor's top frame accepts.
fn top_bytes(g: &Grammar, c: &Cursor) -> Vec<u8> {
    match c.last() {
        None => Vec::new(),
        Some(Frame::Lit(b, p)) => vec![b[*p]],
        Some(Frame::Str { node, len }) => {
            let Node::String { min, max } = &g.nodes[*node] else {
                unreachable!("a string frame")
            };
            let mut out = Vec::new();
            if max.is_none_or(|m| *len < m) {
                out.extend((0..=255u8).filter(|b| plain_char(*b)));
            }
            if len >= min {
                out.push(b'"');
            }
            out
        }
        Some(Frame::Num { node, st }) => {
            let Node::Number(b) = &g.nodes[*node] else {
                unreachable!("a number frame")
            };
            b.allowed(st)
        }
        Some(other) => {
            unreachable!("expanded cursors end in a literal, string or number, not {other:?}")
        }
    }
}

/// A cursor after `byte`, before expansion; `None` if it does not accept it.
fn step(g: &Grammar, c: &Cursor, byte: u8) -> Option<Cursor> {
    let mut c = c.clone();
    match c.last_mut()? {
        Frame::Lit(b, p) => {
            if b[*p] != byte {
                return None;
            }
            *p += 1;
        }
        Frame::Str { node, len } => {
            let Node::String { min, max } = &g.nodes[*node] else {
                unreachable!("a string frame")
            };
            if byte == b'"' && *len >= *min {
                c.pop();
            } else if plain_char(byte) && max.is_none_or(|m| *len < m) {
                *len += 1;
            } else {
                return None;
            }
        }
        Frame::Num { node, st } => {
            let Node::Number(b) = &g.nodes[*node] else {
                unreachable!("a number frame")
            };
            let next = st.push(byte, b)?;
            b.min_extra(&next)?;
            *st = next;
        }
        _ => return None,
    }
    Some(c)
}

/// Expands `c` until its top frame writes bytes, forking at every open choice.
fn expand(g: &Grammar, mut c: Cursor, out: &mut Vec<Cursor>) {
    loop {
        let Some(top) = c.last().cloned() else {
            out.push(c);
            return;
        };
        let step = match top {
            Frame::Lit(b, p) if p == b.len() => {
                c.pop();
                ControlFlow::Continue(())
            }
            Frame::Lit(..) | Frame::Str { .. } => {
                out.push(c);
                return;
            }
            Frame::Num { node, st } => {
                end_or_extend_number(g, c, node, st, out);
                return;
            }
            Frame::Value(n) => {
                c.pop();
                open_value(g, &mut c, n, out)
            }
            Frame::Obj {
                node,
                next,
                written,
            } => {
                c.pop();
                next_property(g, &mut c, node, next, written, out)
            }
            Frame::Arr { node, count } => {
                c.pop();
                next_item(g, &mut c, node, count, out)
            }
            Frame::FreeObj { count } => {
                c.pop();
                next_free_member(g, &mut c, count, out);
                ControlFlow::Continue(())
            }
            Frame::FreeArr { count } => {
                c.pop();
                next_free_item(g, &mut c, count, out);
                ControlFlow::Continue(())
            }
        };
        if step.is_break() {
            return;
        }
    }
}

// Each step below is given the cursor with the frame it expands popped. It
// pushes every fork it opens to `out` (through `expand`) and answers
// `Continue` when `c` itself has more to expand, `Break` when the forks took
// every way on.

/// A number on top (`st` written so far): forks a cursor that ends it if it
/// is complete, and keeps `c` if it can take more digits.
fn end_or_extend_number(g: &Grammar, c: Cursor, node: NodeId, st: NumState, out: &mut Vec<Cursor>) {
    let Node::Number(b) = &g.nodes[node] else {
        unreachable!("a number frame")
    };
    let complete = b.min_extra(&st) == Some(0);
    let extendable = !b.allowed(&st).is_empty();
    if complete {
        let mut ended = c.clone();
        ended.pop();
        expand(g, ended, out);
    }
    if extendable {
        out.push(c);
    }
}

/// Opens value `n`: pushes its opening bytes and the frame that writes its
/// body, or forks once per literal or `anyOf` branch.
fn open_value(g: &Grammar, c: &mut Cursor, n: NodeId, out: &mut Vec<Cursor>) -> ControlFlow<()> {
    match &g.nodes[n] {
        Node::Object(_) => c.extend([
            Frame::Obj {
                node: n,
                next: 0,
                written: false,
            },
            lit(b"{"),
        ]),
        Node::FreeObject => c.extend([Frame::FreeObj { count: 0 }, lit(b"{")]),
        Node::Array { .. } => c.extend([Frame::Arr { node: n, count: 0 }, lit(b"[")]),
        Node::FreeArray => c.extend([Frame::FreeArr { count: 0 }, lit(b"[")]),
        Node::String { .. } => c.extend([Frame::Str { node: n, len: 0 }, lit(b"\"")]),
        Node::Number(_) => c.push(Frame::Num {
            node: n,
            st: NumState::default(),
        }),
        Node::Literals(ls) => {
            for l in ls {
                let mut d = c.clone();
                d.push(Frame::Lit(l.clone(), 0));
                expand(g, d, out);
            }
            return ControlFlow::Break(());
        }
        Node::AnyOf(alts) => {
            for a in alts {
                let mut d = c.clone();
                d.push(Frame::Value(*a));
                expand(g, d, out);
            }
            return ControlFlow::Break(());
        }
    }
    ControlFlow::Continue(())
}

/// Inside object `node` from property `next` on: forks one cursor per
/// property that may come next (up to the first required one), and closes
/// the object in `c` when no required property is left.
fn next_property(
    g: &Grammar,
    c: &mut Cursor,
    node: NodeId,
    next: usize,
    written: bool,
    out: &mut Vec<Cursor>,
) -> ControlFlow<()> {
    let Node::Object(props) = &g.nodes[node] else {
        unreachable!("an object frame")
    };
    for (j, p) in props.iter().enumerate().skip(next) {
        let mut d = c.clone();
        let key = if written {
            p.comma_key.clone()
        } else {
            p.key.clone()
        };
        d.extend([
            Frame::Obj {
                node,
                next: j + 1,
                written: true,
            },
            Frame::Value(p.value),
            Frame::Lit(key, 0),
        ]);
        expand(g, d, out);
        if p.required {
            break;
        }
    }
    if props[next.min(props.len())..].iter().all(|p| !p.required) {
        c.push(lit(b"}"));
        return ControlFlow::Continue(());
    }
    ControlFlow::Break(())
}

/// Inside array `node` with `count` items: forks a cursor with one more item
/// if the maximum allows, and closes the array in `c` if the minimum is met.
fn next_item(
    g: &Grammar,
    c: &mut Cursor,
    node: NodeId,
    count: usize,
    out: &mut Vec<Cursor>,
) -> ControlFlow<()> {
    let Node::Array { items, min, max } = &g.nodes[node] else {
        unreachable!("an array frame")
    };
    if max.is_none_or(|m| count < m) {
        let mut d = c.clone();
        d.extend([
            Frame::Arr {
                node,
                count: count + 1,
            },
            Frame::Value(*items),
        ]);
        if count > 0 {
            d.push(lit(b","));
        }
        expand(g, d, out);
    }
    if count >= *min {
        c.push(lit(b"]"));
        return ControlFlow::Continue(());
    }
    ControlFlow::Break(())
}

/// Inside a free object with `count` members: forks a cursor with one more
/// `"key":value` member and closes the object in `c`.
fn next_free_member(g: &Grammar, c: &mut Cursor, count: usize, out: &mut Vec<Cursor>) {
    let mut d = c.clone();
    d.extend([
        Frame::FreeObj { count: count + 1 },
        Frame::Value(g.any),
        lit(b":"),
        Frame::Str {
            node: g.free_string,
            len: 0,
        },
        lit(if count > 0 { b",\"" } else { b"\"" }),
    ]);
    expand(g, d, out);
    c.push(lit(b"}"));
}

/// Inside a free array with `count` items: forks a cursor with one more item
/// and closes the array in `c`.
fn next_free_item(g: &Grammar, c: &mut Cursor, count: usize, out: &mut Vec<Cursor>) {
    let mut d = c.clone();
    d.extend([Frame::FreeArr { count: count + 1 }, Frame::Value(g.any)]);
    if count > 0 {
        d.push(lit(b","));
    }
    expand(g, d, out);
    c.push(lit(b"]"));
}

/// The fewest bytes that complete a cursor.
fn cursor_min(g: &Grammar, c: &Cursor) -> usize {
    c.iter().map(|f| frame_min(g, f)).sum()
}

fn frame_min(g: &Grammar, f: &Frame) -> usize {
    match f {
        Frame::Value(n) => g.min_len[*n],
        Frame::Lit(b, p) => b.len() - p,
        Frame::Obj {
            node,
            next,
            written,
        } => {
            let Node::Object(props) = &g.nodes[*node] else {
                unreachable!("an object frame")
            };
            let mut written = *written;
            let mut total = 1;
            for p in props.iter().skip(*next).filter(|p| p.required) {
                total += if written {
                    p.comma_key.len()
                } else {
                    p.key.len()
                } + g.min_len[p.value];
                written = true;
            }
            total
        }
        Frame::Arr { node, count } => {
            let Node::Array { items, min, .. } = &g.nodes[*node] else {
                unreachable!("an array frame")
            };
            let more = min.saturating_sub(*count);
            let commas = if *count > 0 {
                more
            } else {
                more.saturating_sub(1)
            };
            1 + more * g.min_len[*items] + commas
        }
        Frame::FreeObj { .. } | Frame::FreeArr { .. } => 1,
        Frame::Str { node, len } => {
            let Node::String { min, .. } = &g.nodes[*node] else {
                unreachable!("a string frame")
            };
            min.saturating_sub(*len) + 1
        }
        Frame::Num { node, st } => {
            let Node::Number(b) = &g.nodes[*node] else {
                unreachable!("a number frame")
            };
            b.min_extra(st).unwrap_or(usize::MAX / 4)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::serve::json::Json;

    fn grammar(v: Value) -> Arc<Grammar> {
        Arc::new(Grammar::from_schema(&serde_json::from_value::<Json>(v).unwrap()).unwrap())
    }

    /// Decodes by always taking the byte ranked first by `rank` (a stand-in for logits).
    fn decode(g: Arc<Grammar>, budget: usize, rank: impl Fn(usize, u8) -> u32) -> String {
        let mut c = Constraint::new(g);
        let mut out = Vec::new();
        assert!(c.min_remaining() <= budget);
        while c.can_continue() {
            let ch = c.choices(budget - out.len());
            if ch.bytes.is_empty() {
                assert!(c.is_complete());
                break;
            }
            let b = *ch
                .bytes
                .iter()
                .max_by_key(|b| (rank(out.len(), **b), **b))
                .unwrap();
            if ch.may_end && rank(out.len(), END_BYTE) > rank(out.len(), b) {
                break;
            }
            c.advance(b);
            out.push(b);
        }
        assert!(c.is_complete());
        assert!(out.len() <= budget);
        String::from_utf8(out).unwrap()
    }

    fn menu() -> Value {
        json!({"anyOf": [
            {"type": "object", "properties": {
                "experiment": {"type": "string", "enum": ["deepen_warm_set"]},
                "params": {"type": "object", "properties": {"warm_set": {"type": "integer", "minimum": 0, "maximum": 1024}},
                           "required": ["warm_set"], "additionalProperties": false},
                "rationale": {"type": "string", "maxLength": 400}},
             "required": ["experiment", "params", "rationale"], "additionalProperties": false},
            {"type": "object", "properties": {
                "experiment": {"type": "string", "enum": ["rebalance_trunk_cache"]},
                "params": {"type": "object", "properties": {"trunk_fraction": {"type": "number", "minimum": 0.0, "maximum": 1.0}},
                           "required": ["trunk_fraction"], "additionalProperties": false},
                "rationale": {"type": "string", "maxLength": 400}},
             "required": ["experiment", "params", "rationale"], "additionalProperties": false}
        ]})
    }

    #[test]
    fn menu_answers_parse_and_fit_the_budget() {
        for budget in [90, 120, 600] {
            for seed in 0..20u32 {
                let text = decode(grammar(menu()), budget, |i, b| {
                    (u32::from(b).wrapping_mul(2_654_435_761)
                        ^ seed.wrapping_mul(97)
                        ^ (i as u32).wrapping_mul(40503))
                        % 1000
                });
                let v: Value =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
                assert_eq!(keys.len(), 3, "{text}");
                assert!(v["rationale"].as_str().unwrap().len() <= 400);
                if v["experiment"] == "deepen_warm_set" {
                    let w = v["params"]["warm_set"].as_i64().unwrap();
                    assert!((0..=1024).contains(&w), "{text}");
                } else {
                    let f = v["params"]["trunk_fraction"].as_f64().unwrap();
                    assert!((0.0..=1.0).contains(&f), "{text}");
                }
            }
        }
    }

    #[test]
    fn optional_properties_and_free_objects() {
        let g = grammar(
            json!({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "array", "items": {"type": "integer", "minimum": -3, "maximum": 3}, "maxItems": 2}}, "required": ["c"]}),
        );
        for seed in 0..10u32 {
            let text = decode(g.clone(), 64, |i, b| (u32::from(b) ^ seed ^ i as u32) % 7);
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(v["c"].as_array().unwrap().len() <= 2, "{text}");
        }
        let g = Arc::new(Grammar::json_object());
        for budget in [2, 5, 40] {
            let text = decode(g.clone(), budget, |i, b| {
                (u32::from(b) * 31 + i as u32) % 11
            });
            assert!(
                serde_json::from_str::<Value>(&text).unwrap().is_object(),
                "{text}"
            );
        }
    }

    #[test]
    fn top_level_number_may_end_or_go_on() {
        let g = grammar(json!({"type": "integer", "minimum": 1, "maximum": 500}));
        let mut c = Constraint::new(g);
        c.advance(b'4');
        let ch = c.choices(10);
        assert!(ch.may_end);
        assert_eq!(ch.bytes, b"0123456789".to_vec());
        c.advance(b'9');
        assert_eq!(c.choices(10).bytes, b"0123456789".to_vec());
        c.advance(b'9');
        assert!(!c.can_continue() && c.is_complete());
    }
}
