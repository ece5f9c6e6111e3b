//! The bandit's default exploration: a line search along each knob, from
//! what was measured on the live profile.
//!
//! Every menu entry with one number parameter is a line through the live
//! value. Trying each of its grid points in turn (UCB1 plays every arm once)
//! spends an A/B per point, most of them on moves too small to show, and
//! starts over on each new live profile. A person tuning by hand does
//! better: take the big step in the direction the token's parts point,
//! halve it when it overshoots, and stop when even the big step changes
//! nothing. That is what this does, per entry, each cycle:
//!
//! - **the favoured side** (more of the lever: a longer draft, a deeper warm
//!   set, more pins; for the trunk/cache split, towards the larger measured
//!   part of the token): the farthest untried value first, and after a
//!   value the planner refused (it costs no engine time) the next one
//!   inwards, so the first value measured is the largest the stack allows;
//!   once a value on that side lost, broke the output or failed (or won
//!   but its confirmation did not repeat the win), the untried
//!   value nearest the midpoint between it and the last win (or the live
//!   value): a bisection;
//! - **the other side**, once the favoured one has nothing left: the nearest
//!   untried value, one grid step at a time while each step wins;
//! - a side whose move was within noise or inconclusive is done: on a knob
//!   whose response is monotone near the live value, a smaller move shows
//!   even less, and a farther one is the side's next line search on a new
//!   live profile.
//!
//! What was measured on the live profile is the menu's exclusions (the cycle
//! puts every value decided or refused on it there, with the experiment), and
//! each decided experiment's verdict is read from the history, as are the
//! live profile's failed experiments (an engine refusing a candidate is no
//! decision, so no exclusion, but the line must not offer it again). Entries are
//! ordered by [`levers::priority`]: the largest measured part of the token
//! first, shared over the values of the entry already measured here; an
//! entry whose next value is a step has a quarter of its lead, so leaps go
//! first.
//!
//! `rerank_pins` has a line only on a profile with no pins, where a re-rank
//! of none is the live profile (`pin_count 0`). On a pinned profile a
//! re-rank at the live count follows the heat, an experiment of its own,
//! so no count is the live value, and the pins' arms come in UCB1's order.
//! Without the line, a served model on a profile with no pins measured pin
//! count after pin count, each within noise (the shoot-out's A at d663376:
//! seven, 9.1 of the 17 engine s after its last approval).

use super::levers::{self, TokenShares};
use crate::ledger::ExperimentOutcome;
use crate::menu::{Closed, Menu, MenuId, ParamKind, ParamValue, Proposal, Why};
use crate::vocab::{Digest, VerdictKind};

/// What one decided value says about its side of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// A win: the line goes on beyond it.
    Passed,
    /// A loss, a broken output or a failure, or a win its independent
    /// confirmation did not repeat: the best value on this side lies
    /// between the last win and it.
    Wall,
    /// Refused by the planner: the stack cannot run it, and likely nothing
    /// beyond it; the next value inwards costs no more than a cycle to ask.
    Edge,
    /// Within noise or inconclusive: this side shows nothing worth a cycle.
    Flat,
}

fn mark(why: &Why, history: &[ExperimentOutcome]) -> Option<Mark> {
    match why {
        Why::Live => None,
        Why::RefusedByPlanner { .. } => Some(Mark::Edge),
        Why::Decided { experiment } => {
            let verdict = history
                .iter()
                .find(|e| e.experiment_id.0 == *experiment)?
                .verdict?;
            Some(match verdict {
                VerdictKind::Win if unrepeated(*experiment, history) => Mark::Wall,
                VerdictKind::Win => Mark::Passed,
                VerdictKind::Loss
                | VerdictKind::HashMismatch
                | VerdictKind::Failed
                | VerdictKind::Rejected => Mark::Wall,
                VerdictKind::WithinNoise | VerdictKind::Inconclusive => Mark::Flat,
            })
        }
    }
}

/// Whether the win `experiment`'s confirmation decided and did not win: an
/// unconfirmed win is never staged, so the line must not call its side
/// passed and stop there (the loop would converge on a win it cannot
/// stage). A confirmation that failed to measure is run again, and one not
/// run yet leaves the win passed meanwhile.
fn unrepeated(experiment: i64, history: &[ExperimentOutcome]) -> bool {
    history.iter().any(|e| {
        e.confirmation_of.is_some_and(|c| c.0 == experiment)
            && matches!(
                e.verdict,
                Some(
                    VerdictKind::Loss
                        | VerdictKind::WithinNoise
                        | VerdictKind::Inconclusive
                        | VerdictKind::HashMismatch
                )
            )
    })
}

/// A step's share of its entry's lead: one grid point back from where a
/// knob's big move took it shows a small effect at best, so every other
/// knob's leap goes first. On the shoot-out's profile after a draft of 8,
/// the draft's step to 7 (within noise every seed) went before the split's
/// leap that won (#16).
const STEP_SHARE: f64 = 0.25;

/// How a side is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stride {
    /// The farthest value first, then bisection.
    Leap,
    /// The nearest value, one step at a time.
    Step,
}

/// The next arm of every entry that has one on the live profile, with the
/// entry's lead (larger first): indices into `arms`, which must be what
/// [`super::bandit::arms`] made of `menu`.
pub fn next_arms(
    arms: &[Proposal],
    menu: &Menu,
    history: &[ExperimentOutcome],
    live_digest: Option<&Digest>,
    shares: Option<&TokenShares>,
) -> Vec<(usize, f64)> {
    let mut out = Vec::new();
    for line in lines(menu, history, live_digest) {
        let untried: Vec<(usize, f64)> = arms
            .iter()
            .enumerate()
            .filter(|(_, a)| a.experiment == line.entry)
            .filter(|(_, a)| {
                // A failed value is still an arm (no exclusion): not this line's.
                let x = a.params.get(line.param).and_then(ParamValue::as_f64);
                !line.marks.iter().any(|(m, _)| Some(*m) == x)
            })
            .filter_map(|(i, a)| Some((i, a.params.get(line.param).and_then(ParamValue::as_f64)?)))
            .collect();
        let up = favours_up(line.entry, shares);
        let leap = next_on_side(
            line.live,
            if up { 1.0 } else { -1.0 },
            Stride::Leap,
            &line.marks,
            &untried,
        );
        let next = leap.map(|i| (i, 1.0)).or_else(|| {
            next_on_side(
                line.live,
                if up { -1.0 } else { 1.0 },
                Stride::Step,
                &line.marks,
                &untried,
            )
            .map(|i| (i, STEP_SHARE))
        });
        if let Some((i, share)) = next {
            out.push((
                i,
                share * levers::priority(shares, line.entry, line.measured),
            ));
        }
    }
    out
}

/// The ranges of each line the search is done with on the live profile,
/// closed to every proposer ([`Menu::closing`]): on each side of the live
/// value, the values up to the farthest win beyond which the line goes on
/// (the live value and the wins themselves are excluded already); beyond a
/// wall or a planner's refusal, the rest of the side; and the whole side
/// once a move on it was within noise or inconclusive. What is left open is
/// exactly where [`next_arms`] still looks, at any value, not only the
/// grid's: a served model that names values off the grid then closes a
/// side with one A/B, as the bandit does, instead of walking it value by
/// value (#30: 95-119 warm-set A/Bs per seed in the shoot-out, all within
/// noise), and the loop converges whoever proposes.
pub fn done_ranges(
    menu: &Menu,
    history: &[ExperimentOutcome],
    live_digest: Option<&Digest>,
) -> Vec<Closed> {
    let mut out = Vec::new();
    for line in lines(menu, history, live_digest) {
        for dir in [1.0, -1.0] {
            let bound = if dir > 0.0 { line.max } else { line.min };
            let to = |d: f64| line.live + d * dir;
            let range = |a: f64, b: f64, why: String| Closed {
                experiment: line.entry,
                param: line.param.to_string(),
                lo: a.min(b).max(line.min),
                hi: a.max(b).min(line.max),
                why,
            };
            let side = if dir > 0.0 { "above" } else { "below" };
            let live = crate::menu::shown_value(&number(line.live, line.integer));
            let shown = |d: f64| crate::menu::shown_value(&number(to(d), line.integer));
            match side_of(line.live, dir, &line.marks) {
                Side::Done { at } => out.push(range(
                    line.live,
                    bound,
                    format!(
                        "is on the side {side} the live {live} where the line search is done on \
                         this profile ({} {} was within noise or inconclusive: a nearer move \
                         shows even less, a farther one is the next line on a new live profile)",
                        line.param,
                        shown(at)
                    ),
                )),
                Side::Open { from, wall } => {
                    if from > 0.0 {
                        out.push(range(
                            line.live,
                            to(from),
                            format!(
                                "lies between the live {live} and {} {}, which won on this \
                                 profile: the line goes on beyond the win",
                                line.param,
                                shown(from)
                            ),
                        ));
                    }
                    if let Some((w, m)) = wall {
                        let what = if m == Mark::Edge {
                            "was refused by the planner"
                        } else {
                            "lost, broke the output, failed or did not repeat its win"
                        };
                        out.push(range(
                            to(w),
                            bound,
                            format!(
                                "lies at or beyond {} {}, which {what} on this profile: the \
                                 line searches between it and the live value",
                                line.param,
                                shown(w)
                            ),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// One knob's line through the live value: what was measured on it.
struct Line<'m> {
    entry: MenuId,
    param: &'m str,
    live: f64,
    min: f64,
    max: f64,
    integer: bool,
    /// Values decided on the live profile (how many, for the priority).
    measured: u32,
    marks: Vec<(f64, Mark)>,
}

/// The line of every menu entry that has one on the live profile.
fn lines<'m>(
    menu: &'m Menu,
    history: &[ExperimentOutcome],
    live_digest: Option<&Digest>,
) -> Vec<Line<'m>> {
    let mut out = Vec::new();
    for entry in menu.entries() {
        let [param] = entry.params.as_slice() else {
            continue;
        };
        let (min, max, integer) = match param.kind {
            ParamKind::Enum { .. } => continue,
            ParamKind::Integer { min, max, .. } => (min as f64, max as f64, true),
            ParamKind::Number { min, max, .. } => (min, max, false),
        };
        let on_line = menu
            .excluded()
            .iter()
            .filter(|x| x.experiment == entry.id && x.param == param.name);
        let Some(live) = on_line
            .clone()
            .find(|x| x.why == Why::Live)
            .and_then(|x| x.value.as_f64())
        else {
            continue;
        };
        let measured = on_line
            .clone()
            .filter(|x| matches!(x.why, Why::Decided { .. }))
            .count() as u32;
        let failed = history
            .iter()
            .filter(|e| Some(&e.base_digest) == live_digest && e.menu_id == entry.id)
            .filter(|e| e.verdict == Some(VerdictKind::Failed))
            .filter_map(|e| e.parameters.get(&param.name)?.as_f64())
            .map(|x| (x, Mark::Wall));
        let marks: Vec<(f64, Mark)> = on_line
            .filter_map(|x| Some((x.value.as_f64()?, mark(&x.why, history)?)))
            .chain(failed)
            .collect();
        out.push(Line {
            entry: entry.id,
            param: &param.name,
            live,
            min,
            max,
            integer,
            measured,
            marks,
        });
    }
    out
}

fn number(x: f64, integer: bool) -> ParamValue {
    if integer {
        ParamValue::Integer(x.round() as i64)
    } else {
        ParamValue::Number(x)
    }
}

/// Whether `id` is searched along a line on `menu`'s live profile: an entry
/// with one number parameter whose live value the menu names (the same
/// condition as [`next_arms`]'s). Every other entry's arms come in UCB1's
/// order.
pub fn has_line(menu: &Menu, id: MenuId) -> bool {
    let Ok(entry) = menu.entry(id) else {
        return false;
    };
    let [param] = entry.params.as_slice() else {
        return false;
    };
    !matches!(param.kind, ParamKind::Enum { .. })
        && menu.excluded().iter().any(|x| {
            x.experiment == id
                && x.param == param.name
                && x.why == Why::Live
                && x.value.as_f64().is_some()
        })
}

/// Which way "more of the lever" is. The split moves RAM towards the larger
/// measured part of the token (without parts, towards the trunk, which every
/// token reads whole); every other knob's larger value is its stronger move.
fn favours_up(entry: MenuId, shares: Option<&TokenShares>) -> bool {
    match (entry, shares) {
        (MenuId::RebalanceTrunkCache, Some(s)) => s.trunk >= s.expert,
        _ => true,
    }
}

/// What the marks say about the side of `live` that `dir` (+1 or -1)
/// points to, in distances from `live` along it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    /// A move on it was within noise or inconclusive, at distance `at`
    /// (beyond every win): nothing on it is worth a cycle.
    Done { at: f64 },
    /// Open beyond `from` (the farthest win, or 0), up to the first wall or
    /// refusal beyond it, if any.
    Open {
        from: f64,
        wall: Option<(f64, Mark)>,
    },
}

fn side_of(live: f64, dir: f64, marks: &[(f64, Mark)]) -> Side {
    let mut seen: Vec<(f64, Mark)> = marks
        .iter()
        .map(|(x, m)| ((x - live) * dir, *m))
        .filter(|(d, _)| *d > 0.0)
        .collect();
    seen.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut from = 0.0;
    for (d, m) in seen {
        match m {
            Mark::Passed => from = d,
            Mark::Wall | Mark::Edge => {
                return Side::Open {
                    from,
                    wall: Some((d, m)),
                };
            }
            Mark::Flat => return Side::Done { at: d },
        }
    }
    Side::Open { from, wall: None }
}

/// The next untried value on the side of `live` that `dir` (+1 or -1)
/// points to, or `None` when that side is done.
fn next_on_side(
    live: f64,
    dir: f64,
    stride: Stride,
    marks: &[(f64, Mark)],
    untried: &[(usize, f64)],
) -> Option<usize> {
    let Side::Open { from, wall } = side_of(live, dir, marks) else {
        return None;
    };
    let open: Vec<(usize, f64)> = untried
        .iter()
        .map(|(i, x)| (*i, (x - live) * dir))
        .filter(|(_, d)| *d > from && wall.is_none_or(|(w, _)| *d < w))
        .collect();
    let closest_to = |target: f64| {
        open.iter()
            .min_by(|a, b| {
                (a.1 - target)
                    .abs()
                    .total_cmp(&(b.1 - target).abs())
                    .then(a.1.total_cmp(&b.1))
            })
            .map(|(i, _)| *i)
    };
    match (stride, wall) {
        (Stride::Step, _) => closest_to(from),
        (Stride::Leap, Some((w, Mark::Wall))) => closest_to((from + w) / 2.0),
        (Stride::Leap, _) => open
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| *i),
    }
}

#[cfg(test)]
#[path = "line_search_tests.rs"]
mod tests;
