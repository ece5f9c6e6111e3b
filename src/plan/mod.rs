//! Planners: turn a validated proposal plus the observation into a candidate
//! profile (and the files it names), one planner per menu entry.
//!
//! Planners see only [`Proposal`] values (numbers and the menu's own enum
//! strings), the live profile and measured inputs; nothing the served model
//! wrote reaches a path. File names come from content digests.
//!
//! - [`rerank_pins`]: checked by [`replay`] of the recorded trace.
//! - [`deepen_warm_set`], [`stage_speculative`], [`rebalance_trunk_cache`],
//!   [`remeasure`]: the other entries.
//! - [`pin_list`]: the `K3EXPERTS` format.
//! - [`compose`]: the combined candidate of staged wins on different entries.

pub mod checkpoint;
pub mod compose;
pub mod deepen_warm_set;
pub mod pin_list;
pub mod rebalance_trunk_cache;
pub mod remeasure;
pub mod replay;
pub mod rerank_pins;
pub mod stage_speculative;

use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::heat::{Heat, Trace};
use crate::menu::{Menu, MenuId, ParamKind, ParamValue, Proposal};
use crate::profile::Profile;

pub use pin_list::PinList;

/// GB as the profile and the engines count them (10^9 bytes).
const GB: f64 = 1e9;

/// What a planner may look at. The caller loads the files; planners are pure.
#[derive(Debug, Clone, Copy)]
pub struct PlanContext<'a> {
    pub live: &'a Profile,
    /// The live profile's file: its `pins.file` is relative to its directory.
    pub live_path: &'a Path,
    /// Where candidates and their pin lists go (e.g. `ledger/profiles/`).
    pub profiles_dir: &'a Path,
    /// Bytes of one routed expert (`[stack] expert_bytes`).
    pub expert_bytes: Option<u64>,
    /// Cache slots the engine needs beyond top-k (`[stack] cache_spare_slots`).
    pub cache_spare_slots: u32,
    pub heat: Option<&'a Heat>,
    pub trace: Option<&'a Trace>,
    /// The live pin list (`live.pins_path(live_path)`), when the live profile
    /// names one.
    pub current_pins: Option<&'a PinList>,
    /// Experts each token uses per layer, when the caller knows it, and
    /// from where (the cycle: the checkpoint's declaration,
    /// [`checkpoint::declared_by`]).
    pub top_k: Option<(u32, &'a str)>,
    /// The menu the proposal was validated against: its parameters' grids
    /// (`step`), so a refusal names a value a search would propose.
    pub menu: Option<&'a Menu>,
}

impl PlanContext<'_> {
    /// top-k and where it came from: the caller, the live pin list's header,
    /// or the trace's shape (see [`replay::infer_top_k`]).
    pub fn top_k(&self) -> Option<(u32, &str)> {
        self.top_k
            .or_else(|| self.current_pins.map(|p| (p.top_k, "the live pin list")))
            .or_else(|| {
                self.trace
                    .and_then(replay::infer_top_k)
                    .map(|k| (k, "the trace"))
            })
    }

    /// The grid of a number parameter (its menu entry's `min`, `max` and
    /// `step`), when the menu is known and gives it a step.
    fn grid(&self, id: MenuId, param: &str) -> Option<Grid> {
        let entry = self.menu?.entry(id).ok()?;
        match entry.params.iter().find(|p| p.name == param)?.kind {
            ParamKind::Number {
                min,
                max,
                step: Some(step),
            } if step > 0.0 => Some(Grid { min, max, step }),
            _ => None,
        }
    }

    /// The fewest expert-cache slots the engine runs with for top-k = `k`,
    /// and how to say it in a refusal ("top-k = 4 + 1 spare").
    fn min_cache_slots(&self, k: u32) -> (u64, String) {
        let spare = self.cache_spare_slots;
        let need = u64::from(k) + u64::from(spare);
        if spare == 0 {
            (need, format!("top-k = {k}"))
        } else {
            (
                need,
                format!("top-k = {k} + {spare} spare ([stack] cache_spare_slots)"),
            )
        }
    }

    /// Checks a candidate and names its file; `NoChange` when it is the live
    /// profile.
    fn finish(
        &self,
        candidate: Profile,
        files: Vec<(PathBuf, Vec<u8>)>,
        notes: Value,
    ) -> Result<Plan, PlanRefusal> {
        candidate.validate().map_err(|why| PlanRefusal::Invalid {
            why: format!("the candidate would not be a valid profile: {why}"),
        })?;
        if candidate == *self.live {
            return Err(PlanRefusal::NoChange);
        }
        let candidate_path = self
            .profiles_dir
            .join(format!("{}.toml", candidate.digest()));
        Ok(Plan {
            candidate,
            candidate_path,
            files,
            notes,
            candidate_is_live: false,
        })
    }
}

/// The values a search walks for a number parameter: `min + n × step`, up
/// to `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Grid {
    min: f64,
    max: f64,
    step: f64,
}

impl Grid {
    /// The largest value on the grid no greater than `x` for which `works`
    /// holds, walking down from there; `None` when none does.
    fn largest_working(&self, x: f64, works: impl Fn(f64) -> bool) -> Option<f64> {
        let top = x.min(self.max);
        if top < self.min {
            return None;
        }
        // A hair of slack: 0.95 / 0.05 is 18.999999999999996 in floats.
        let n = ((top - self.min) / self.step + 1e-9).floor() as u64;
        (0..=n)
            .rev()
            .map(|i| self.value(i))
            .filter(|&v| v <= self.max)
            .find(|&v| works(v))
    }

    /// The `i`-th value, rounded as people and the menu write it (nine
    /// decimals): 0.95, not 0.9500000000000001.
    fn value(&self, i: u64) -> f64 {
        ((self.min + i as f64 * self.step) * 1e9).round() / 1e9
    }
}

/// A candidate ready to be written and measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub candidate: Profile,
    /// Where the candidate is written: in the profiles directory, named by its
    /// digest (for `remeasure`, the live profile's own file).
    pub candidate_path: PathBuf,
    /// Files the candidate names (pin lists), named by content digest.
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// What the planner predicted and from what, for the ledger.
    pub notes: Value,
    /// An A/A: the candidate is the live profile and nothing is written.
    pub candidate_is_live: bool,
}

/// Why a proposal yields nothing to measure. Each message says what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanRefusal {
    #[error("{why}; choose another experiment")]
    NotApplicable { why: String },
    #[error("the candidate equals the live profile: nothing to measure; choose other parameters")]
    NoChange,
    #[error("{why}: not measured; choose other parameters or another experiment")]
    NotPredictedToHelp { why: String, notes: Value },
    #[error("missing {what}: {fix}")]
    MissingInput { what: String, fix: String },
    #[error("{why}")]
    Invalid { why: String },
}

impl PlanRefusal {
    /// A short stable name for the ledger.
    pub fn kind(&self) -> &'static str {
        match self {
            PlanRefusal::NotApplicable { .. } => "not_applicable",
            PlanRefusal::NoChange => "no_change",
            PlanRefusal::NotPredictedToHelp { .. } => "not_predicted_to_help",
            PlanRefusal::MissingInput { .. } => "missing_input",
            PlanRefusal::Invalid { .. } => "invalid",
        }
    }

    /// The planner's predictions, when it got far enough to make some.
    pub fn notes(&self) -> Option<&Value> {
        match self {
            PlanRefusal::NotPredictedToHelp { notes, .. } => Some(notes),
            _ => None,
        }
    }
}

/// One menu entry's planner.
pub trait Planner: Sync {
    fn id(&self) -> MenuId;
    fn plan(&self, ctx: &PlanContext<'_>, proposal: &Proposal) -> Result<Plan, PlanRefusal>;

    /// The parameter value whose candidate is the live profile itself,
    /// read off the live profile alone, when there is one: proposing it
    /// can only be refused as [`PlanRefusal::NoChange`]. `None` for an
    /// entry whose result depends on more than the profile (re-ranked pins
    /// follow the heat) or that has no parameter.
    fn unchanged(&self, _live: &Profile) -> Option<(&'static str, ParamValue)> {
        None
    }

    /// The number parameter whose nearby values plan the same candidate on
    /// `live`, and how near (half the band's width): the planner's own
    /// rounding, so a value that close to the live one, or to one decided
    /// or refused, is excluded with it. `None` where values are exact.
    fn same_within(&self, _live: &Profile) -> Option<(&'static str, f64)> {
        None
    }

    /// The values of the entry's number parameter from which on every
    /// value is refused on `live`, whatever the heat or the trace, or is
    /// the live profile again under another number: read off the live
    /// profile and the stack's fixed sizes alone, with why (after the
    /// value, in the validator's words). `None` where no such bound is
    /// known.
    fn infeasible_from(&self, _live: &Profile, _sizes: &StackSizes) -> Option<Infeasible> {
        None
    }
}

/// The stack's fixed sizes a planner may bound a menu by without its
/// measured inputs (`[stack]`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StackSizes {
    /// Bytes of one routed expert (`expert_bytes`).
    pub expert_bytes: Option<u64>,
    /// Cache slots the engine needs beyond top-k (`cache_spare_slots`).
    pub cache_spare_slots: u32,
    /// Experts each token uses per layer, when the checkpoint declares it
    /// or the live pin list's header says (else at least 1 is assumed).
    /// Not the trace's inference: the convergence look reads no trace, and
    /// it must close what the cycle closes.
    pub top_k: Option<u32>,
    /// Routed experts in the whole model, when the checkpoint declares
    /// them ([`checkpoint::Declared::experts`]).
    pub experts: Option<u64>,
}

/// Every value of `param` from `from` on is refused by the planner
/// ([`Planner::infeasible_from`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Infeasible {
    pub param: &'static str,
    pub from: f64,
    pub why: String,
}

/// Every entry's [`Planner::infeasible_from`] on `live`, as ranges the
/// menu closes to every proposer ([`Menu::closing`]): up to the
/// parameter's `max` on `menu`. A value the planner can only refuse costs
/// the bandit a cycle and a served model an answer of the live server; in
/// the shoot-out the bandit spent 34-37 refused cycles a seed on pin counts
/// the cache could not pay for (2026-12-05).
pub fn infeasible(live: &Profile, sizes: &StackSizes, menu: &Menu) -> Vec<crate::menu::Closed> {
    MenuId::ALL
        .iter()
        .filter_map(|&id| {
            let bound = planner(id).infeasible_from(live, sizes)?;
            let max = match menu
                .entry(id)
                .ok()?
                .params
                .iter()
                .find(|p| p.name == bound.param)?
                .kind
            {
                ParamKind::Integer { max, .. } => max as f64,
                ParamKind::Number { max, .. } => max,
                ParamKind::Enum { .. } => return None,
            };
            (bound.from <= max).then(|| crate::menu::Closed {
                experiment: id,
                param: bound.param.to_string(),
                lo: bound.from,
                hi: max,
                why: bound.why,
            })
        })
        .collect()
}

/// Every entry's [`Planner::same_within`] on `live`, for
/// [`crate::menu::Menu::with_resolutions`].
pub fn resolutions(live: &Profile) -> Vec<crate::menu::Resolution> {
    MenuId::ALL
        .iter()
        .filter_map(|&id| {
            planner(id)
                .same_within(live)
                .map(|(param, half_width)| crate::menu::Resolution {
                    experiment: id,
                    param: param.to_string(),
                    half_width,
                })
        })
        .collect()
}

/// Every entry's [`Planner::unchanged`] value on `live`.
pub fn unchanged(live: &Profile) -> Vec<(MenuId, &'static str, ParamValue)> {
    MenuId::ALL
        .iter()
        .filter_map(|&id| {
            planner(id)
                .unchanged(live)
                .map(|(param, value)| (id, param, value))
        })
        .collect()
}

/// The planner of a menu entry.
pub fn planner(id: MenuId) -> &'static dyn Planner {
    match id {
        MenuId::RerankPins => &rerank_pins::RerankPins,
        MenuId::DeepenWarmSet => &deepen_warm_set::DeepenWarmSet,
        MenuId::StageSpeculative => &stage_speculative::StageSpeculative,
        MenuId::RebalanceTrunkCache => &rebalance_trunk_cache::RebalanceTrunkCache,
        MenuId::Remeasure => &remeasure::Remeasure,
    }
}

/// Plans a validated proposal.
pub fn plan(ctx: &PlanContext<'_>, proposal: &Proposal) -> Result<Plan, PlanRefusal> {
    planner(proposal.experiment).plan(ctx, proposal)
}

/// Writes the plan's files, then its candidate profile, each atomically, so a
/// candidate never names a file that is not there yet. Files already holding
/// the same content are left alone (names are content digests), and an A/A
/// writes nothing: the live profile is never rewritten here.
pub fn write_plan(plan: &Plan) -> io::Result<()> {
    for (path, bytes) in &plan.files {
        if std::fs::read(path).is_ok_and(|old| old == *bytes) {
            continue;
        }
        write_creating_dir(path, bytes)?;
    }
    if plan.candidate_is_live {
        return Ok(());
    }
    if Profile::load(&plan.candidate_path).is_ok_and(|p| p == plan.candidate) {
        return Ok(());
    }
    write_creating_dir(&plan.candidate_path, plan.candidate.canonical().as_bytes())
}

fn write_creating_dir(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let named =
        |e: io::Error| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(named)?;
    }
    crate::atomic_file::write(path, bytes).map_err(named)
}

/// An integer parameter of a validated proposal.
fn integer(proposal: &Proposal, name: &str) -> Result<u64, PlanRefusal> {
    proposal
        .params
        .get(name)
        .and_then(|v| v.as_i64())
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| PlanRefusal::Invalid {
            why: format!(
                "{} needs a non-negative integer `{name}`; validate proposals against the menu before planning",
                proposal.experiment
            ),
        })
}

/// A number parameter of a validated proposal.
fn number(proposal: &Proposal, name: &str) -> Result<f64, PlanRefusal> {
    proposal
        .params
        .get(name)
        .and_then(|v| v.as_f64())
        .filter(|x| x.is_finite())
        .ok_or_else(|| PlanRefusal::Invalid {
            why: format!(
                "{} needs a finite number `{name}`; validate proposals against the menu before planning",
                proposal.experiment
            ),
        })
}

/// GB to whole bytes. Profiles written by people hold decimal GB; rounding
/// (not truncating) keeps 0.3 GB at 300,000,000 bytes.
fn gb_to_bytes(gb: f64) -> u64 {
    (gb * GB).round() as u64
}

/// Experts a cache of `cache_gb` holds, computed exactly as the engine does
/// (`floor(cache_gb * 1e9 / expert_bytes)`), float rounding included.
pub fn cache_slots(cache_gb: f64, expert_bytes: u64) -> u64 {
    (cache_gb * GB / expert_bytes as f64).floor() as u64
}

/// The `cache_gb` for `bytes` of cache. `bytes / 1e9` can come out a hair
/// under in float, and the engine's floor would then lose a whole expert
/// slot, so it is raised by the smallest steps until the engine's formula
/// gives `bytes / expert_bytes` slots.
pub fn cache_gb_holding(bytes: u64, expert_bytes: Option<u64>) -> f64 {
    let mut gb = bytes as f64 / GB;
    if let Some(eb) = expert_bytes {
        let want = bytes / eb;
        while cache_slots(gb, eb) < want {
            gb = f64::from_bits(gb.to_bits() + 1);
        }
    }
    gb
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
