//! The projection, labelled as one: the seconds per token the live profile
//! would reach if every remaining lever reached its measured best. It only
//! multiplies figures the ledger holds, each with its source (the runs,
//! experiments, verdicts and stages it comes from); a figure the ledger does
//! not hold is reported missing and what needs it is left out, never guessed.
//!
//! # The model
//!
//! ```text
//! projected = (T × Π f_T + E × Π f_E + R) × Π f_W
//! R         = L − T − E
//! f_X(x)    = median over the A/B pairs of lever x's best experiment of
//!             (candidate X / baseline X), X = trunk term, expert term or
//!             the whole token's seconds
//! ```
//!
//! - `L`, `T`, `E`: the live profile's measured seconds per token and its
//!   trunk and expert terms (medians of its baseline runs in the period, as
//!   the stack's bench measured them per decode token);
//! - `R`: the rest of a token no part covers (the draft, picking tokens),
//!   held unchanged;
//! - `rerank_pins` and `deepen_warm_set` change where experts come from, so
//!   they multiply `E`; `rebalance_trunk_cache` moves RAM between the trunk
//!   and the expert cache, so it multiplies `T` and `E`; `stage_speculative`
//!   changes how many full passes a token costs, so it multiplies the whole
//!   token (`f_W`);
//! - a lever's best experiment is its best open stage on the live profile
//!   (the confirming A/B's runs: unbiased) or else its best first-A/B win
//!   whose confirmation is still pending (optimistic: it was selected for
//!   being good); wins a person refused, or that expired, and wins their
//!   own confirming A/B refuted (by the end of the period) are not
//!   remaining levers.
//!
//! The far-tier hit share (shown for the levers that move experts:
//! `rerank_pins`, `deepen_warm_set`, `rebalance_trunk_cache`) and the draft
//! acceptance (for `stage_speculative`) are shown, for the live profile and
//! for each lever's arms, as the state of those levers; they are not
//! multiplied. Assumptions, stated in the report: each lever acts only on
//! its terms, levers on one term compose multiplicatively (each removes its
//! measured fraction of what is left), and `R` does not move. A term lever
//! whose terms cannot be placed (a stack that does not measure `T` and `E`,
//! as the real engines do not, or a best experiment whose runs lack its
//! term) multiplies the whole token by its own measured whole-token ratio
//! instead, and says why: a confirmed win that waits for approval is a
//! remaining lever whatever the stack reports beside `seconds_per_token`.

use serde::Serialize;

use crate::judge::noise::median;
use crate::ledger::{ExperimentId, LeverRun};
use crate::menu::MenuId;
use crate::vocab::Arm;

/// A number and where in the ledger it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sourced {
    pub value: f64,
    pub source: String,
}

/// One measured part of the live profile, or why it is missing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub name: &'static str,
    pub measured: Result<Sourced, String>,
}

/// The live profile's measured parts, as the builder found them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Parts {
    pub live: Option<Sourced>,
    pub trunk: Option<Sourced>,
    pub expert: Option<Sourced>,
    pub far_share: Option<Sourced>,
    pub acceptance: Option<Sourced>,
}

/// A figure of a token a lever's factor multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Figure {
    Trunk,
    Expert,
    Whole,
}

impl Figure {
    /// The symbol in the formula.
    pub fn symbol(self) -> &'static str {
        match self {
            Figure::Trunk => "T",
            Figure::Expert => "E",
            Figure::Whole => "whole token",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Figure::Trunk => "trunk term",
            Figure::Expert => "expert term",
            Figure::Whole => "seconds per token",
        }
    }

    fn field(self) -> &'static str {
        match self {
            Figure::Trunk => "trunk_seconds_per_token",
            Figure::Expert => "expert_seconds_per_token",
            Figure::Whole => "seconds_per_token",
        }
    }
}

/// Which figures a lever acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Term {
    Expert,
    TrunkAndExpert,
    /// Every term (speculation divides the cost of each token).
    Whole,
}

impl Term {
    pub fn of(menu: MenuId) -> Option<Term> {
        match menu {
            MenuId::RerankPins | MenuId::DeepenWarmSet => Some(Term::Expert),
            MenuId::RebalanceTrunkCache => Some(Term::TrunkAndExpert),
            MenuId::StageSpeculative => Some(Term::Whole),
            MenuId::Remeasure => None,
        }
    }

    pub fn figures(self) -> &'static [Figure] {
        match self {
            Term::Expert => &[Figure::Expert],
            Term::TrunkAndExpert => &[Figure::Trunk, Figure::Expert],
            Term::Whole => &[Figure::Whole],
        }
    }

    /// Whether the far-tier hit share is this lever's state (it moves
    /// experts between tiers), and whether the draft acceptance is (it
    /// drafts): a state line for a lever that cannot move it says nothing.
    fn states(self) -> (bool, bool) {
        match self {
            Term::Expert | Term::TrunkAndExpert => (true, false),
            Term::Whole => (false, true),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Term::Expert => "expert term",
            Term::TrunkAndExpert => "trunk and expert terms",
            Term::Whole => "every term",
        }
    }
}

/// A figure's ratio candidate/baseline within one experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    /// Median over the A/B pairs of candidate / baseline.
    pub value: f64,
    pub pairs: usize,
    /// Medians of each arm, for the reader.
    pub baseline: f64,
    pub candidate: f64,
}

impl Ratio {
    /// The paired ratio of the figure `of` picks, over the pairs where both
    /// arms carry it; `None` when no pair does.
    pub fn paired(runs: &[LeverRun], of: impl Fn(&LeverRun) -> Option<f64>) -> Option<Ratio> {
        let mut pairs: std::collections::BTreeMap<u32, [Option<f64>; 2]> = Default::default();
        for r in runs {
            let slot = usize::from(r.arm == Arm::Candidate);
            if r.arm != Arm::Warmup {
                pairs.entry(r.pair_index).or_default()[slot] = of(r);
            }
        }
        let (mut ratios, mut base, mut cand) = (Vec::new(), Vec::new(), Vec::new());
        for [b, c] in pairs.into_values() {
            if let (Some(b), Some(c)) = (b, c)
                && b > 0.0
            {
                ratios.push(c / b);
                base.push(b);
                cand.push(c);
            }
        }
        Some(Ratio {
            pairs: ratios.len(),
            value: median(&ratios)?,
            baseline: median(&base)?,
            candidate: median(&cand)?,
        })
    }
}

/// Medians per arm (baseline, candidate) of a figure that is a state rather
/// than a cost (far share, acceptance); either side `None` when no run of
/// that arm carries it.
fn arms(runs: &[LeverRun], of: impl Fn(&LeverRun) -> Option<f64>) -> (Option<f64>, Option<f64>) {
    let side = |arm: Arm| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.arm == arm)
            .filter_map(&of)
            .collect();
        median(&v)
    };
    (side(Arm::Baseline), side(Arm::Candidate))
}

/// What the ledger holds about one lever's best measured experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeverEvidence {
    pub menu: MenuId,
    /// Its best measured effect (log ratio of seconds per token) and the
    /// verdict or stage that says so.
    pub best: Sourced,
    /// The experiment whose runs the ratios come from.
    pub experiment: ExperimentId,
    pub whole: Option<Ratio>,
    pub trunk: Option<Ratio>,
    pub expert: Option<Ratio>,
    pub far_share: (Option<f64>, Option<f64>),
    pub acceptance: (Option<f64>, Option<f64>),
}

impl LeverEvidence {
    /// Reads the ratios from the experiment's valid A/B runs.
    pub fn from_runs(
        menu: MenuId,
        best: Sourced,
        experiment: ExperimentId,
        runs: &[LeverRun],
    ) -> LeverEvidence {
        LeverEvidence {
            menu,
            best,
            experiment,
            whole: Ratio::paired(runs, |r| Some(r.seconds_per_token)),
            trunk: Ratio::paired(runs, |r| r.parts.trunk_seconds_per_token),
            expert: Ratio::paired(runs, |r| r.parts.expert_seconds_per_token),
            far_share: arms(runs, |r| r.parts.far_hit_share),
            acceptance: arms(runs, |r| r.parts.draft_acceptance),
        }
    }

    fn ratio(&self, f: Figure) -> Option<&Ratio> {
        match f {
            Figure::Trunk => self.trunk.as_ref(),
            Figure::Expert => self.expert.as_ref(),
            Figure::Whole => self.whole.as_ref(),
        }
    }
}

/// One factor the projection multiplies, with where it was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Factor {
    pub figure: Figure,
    pub value: f64,
    pub source: String,
}

/// One lever's place in the projection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lever {
    pub menu: MenuId,
    pub term: Term,
    /// Its best measured effect with its source; `None` when it has no
    /// measured win on the live profile.
    pub best: Option<Sourced>,
    /// The factors applied (empty when the lever is not applied).
    pub factors: Vec<Factor>,
    /// Measured state of the lever in its experiment's arms (far-tier hit
    /// share, draft acceptance): shown, not multiplied.
    pub state: Vec<String>,
    /// Why the lever is left out of the projected number, when it is.
    pub not_applied: Option<String>,
}

/// The result: `None` projected when the live speed itself is unmeasured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Projection {
    pub parts: Vec<Part>,
    pub levers: Vec<Lever>,
    pub projected: Option<f64>,
    /// The formula with the numbers substituted, for the reader to check.
    pub arithmetic: Option<String>,
}

fn part(name: &'static str, v: &Option<Sourced>, missing: String) -> Part {
    Part {
        name,
        measured: v.clone().ok_or(missing),
    }
}

/// Why a part is missing: no baseline run yet (nothing to read it from), or
/// runs that do not carry it (the stack's bench does not report it).
fn not_in_runs(measured: bool, field: &str) -> String {
    if measured {
        format!(
            "not in the ledger: no baseline run of the live profile in the period carries `{field}` (the stack's bench does not report it)"
        )
    } else {
        format!(
            "not measured yet: no baseline run of the live profile in the period (`{field}` is read from those runs)"
        )
    }
}

fn state(what: &str, (b, c): (Option<f64>, Option<f64>)) -> Option<String> {
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    (b.is_some() || c.is_some()).then(|| format!("{what} {} → {}", show(b), show(c)))
}

/// Computes the projection from the live profile's measured parts and each
/// lever's best measured experiment; `excluded` says, per lever, why a win
/// it had is not a remaining lever (its confirmation refuted it).
pub fn project(
    parts: &Parts,
    evidence: &[LeverEvidence],
    excluded: &[(MenuId, String)],
) -> Projection {
    let residual = match (&parts.live, &parts.trunk, &parts.expert) {
        (Some(l), Some(t), Some(e)) => Some(Sourced {
            value: l.value - t.value - e.value,
            source: format!(
                "derived: L {:.4} − T {:.4} − E {:.4}; the time no part covers (draft passes, picking tokens), held unchanged",
                l.value, t.value, e.value
            ),
        }),
        _ => None,
    };
    let measured = parts.live.is_some();
    let shown = vec![
        part(
            "live seconds per token (L)",
            &parts.live,
            "not in the ledger: no measured baseline run in the period".into(),
        ),
        part(
            "trunk term (T)",
            &parts.trunk,
            not_in_runs(measured, Figure::Trunk.field()),
        ),
        part(
            "expert term (E)",
            &parts.expert,
            not_in_runs(measured, Figure::Expert.field()),
        ),
        part(
            "rest of a token (R = L − T − E)",
            &residual,
            "not derived: needs L, T and E".into(),
        ),
        part(
            "far-tier hit share (h)",
            &parts.far_share,
            not_in_runs(measured, "far_hit_share"),
        ),
        part(
            "speculation acceptance (a)",
            &parts.acceptance,
            if measured {
                format!(
                    "{}, or speculation is off in the live profile",
                    not_in_runs(measured, "draft_acceptance")
                )
            } else {
                not_in_runs(measured, "draft_acceptance")
            },
        ),
    ];
    let terms = parts.trunk.as_ref().zip(parts.expert.as_ref());
    let missing_terms: Vec<&str> = [(parts.trunk.is_none(), "T"), (parts.expert.is_none(), "E")]
        .iter()
        .filter(|(m, _)| *m)
        .map(|(_, n)| *n)
        .collect();
    let levers: Vec<Lever> = MenuId::ALL
        .iter()
        .filter_map(|&m| Term::of(m).map(|t| (m, t)))
        .map(|(menu, term)| {
            let excluded: Vec<&str> = excluded
                .iter()
                .filter(|(m, _)| *m == menu)
                .map(|(_, why)| why.as_str())
                .collect();
            lever(
                menu,
                term,
                evidence,
                &excluded,
                terms.is_some(),
                &missing_terms,
            )
        })
        .collect();
    let Some(live) = &parts.live else {
        return Projection {
            parts: shown,
            levers,
            projected: None,
            arithmetic: None,
        };
    };
    let chain = |f: Figure| -> (f64, String) {
        let mut product = 1.0;
        let mut text = String::new();
        for l in &levers {
            for x in l.factors.iter().filter(|x| x.figure == f) {
                product *= x.value;
                text.push_str(&format!(" × {:.4} [{}]", x.value, l.menu));
            }
        }
        (product, text)
    };
    let (fw, whole_text) = chain(Figure::Whole);
    let (projected, arithmetic) = match (terms, &residual) {
        (Some((t, e)), Some(r)) => {
            let (ft, t_text) = chain(Figure::Trunk);
            let (fe, e_text) = chain(Figure::Expert);
            let p = (t.value * ft + e.value * fe + r.value) * fw;
            (
                p,
                format!(
                    "(T {:.4}{t_text} + E {:.4}{e_text} + R {:.4}){whole_text}",
                    t.value, e.value, r.value
                ),
            )
        }
        _ => (
            live.value * fw,
            format!(
                "L {:.4}{whole_text} ({} not measured: every lever on the whole token)",
                live.value,
                missing_terms.join(" and ")
            ),
        ),
    };
    let projected = projected.max(0.0);
    Projection {
        parts: shown,
        levers,
        projected: Some(projected),
        arithmetic: Some(format!("{arithmetic} = {projected:.4} s/token")),
    }
}

fn lever(
    menu: MenuId,
    term: Term,
    evidence: &[LeverEvidence],
    excluded: &[&str],
    terms_known: bool,
    missing_terms: &[&str],
) -> Lever {
    let mut out = Lever {
        menu,
        term,
        best: None,
        factors: Vec::new(),
        state: Vec::new(),
        not_applied: None,
    };
    let Some(ev) = evidence.iter().find(|e| e.menu == menu) else {
        out.not_applied = Some(if excluded.is_empty() {
            "no measured win on the live profile in this period (wins a person refused excluded)"
                .into()
        } else {
            format!(
                "no measured win left on the live profile in this period: {}",
                excluded.join("; ")
            )
        });
        return out;
    };
    out.best = Some(ev.best.clone());
    let (far, acceptance) = term.states();
    if far {
        out.state.extend(state("far-tier hit share", ev.far_share));
    }
    if acceptance {
        out.state.extend(state("draft acceptance", ev.acceptance));
    }
    if term != Term::Whole && !terms_known {
        let why = format!(
            "the live profile's {} not measured, so its terms cannot be placed",
            missing_terms.join(" and ")
        );
        return on_the_whole_token(out, ev, &why);
    }
    for &f in term.figures() {
        match ev.ratio(f) {
            Some(r) => out.factors.push(factor(ev, f, r, "")),
            None => {
                out.factors.clear();
                let why = format!(
                    "experiment #{}'s runs carry no `{}` in both arms of a pair",
                    ev.experiment,
                    f.field()
                );
                return on_the_whole_token(out, ev, &why);
            }
        }
    }
    out
}

/// The factor of figure `f` measured by `ev`'s experiment, its source
/// ending with `why` it is applied there.
fn factor(ev: &LeverEvidence, f: Figure, r: &Ratio, why: &str) -> Factor {
    Factor {
        figure: f,
        value: r.value,
        source: format!(
            "experiment #{}: median of {} paired ratios candidate/baseline of the {} ({:.4} / {:.4} s){why}",
            ev.experiment,
            r.pairs,
            f.name(),
            r.candidate,
            r.baseline
        ),
    }
}

/// A term lever whose terms cannot be placed multiplies the whole token by
/// the whole-token ratio its experiment measured; without that ratio it is
/// not applied, saying `why`.
fn on_the_whole_token(mut out: Lever, ev: &LeverEvidence, why: &str) -> Lever {
    match &ev.whole {
        Some(r) => {
            let on = format!("; on the whole token: {why}");
            out.factors.push(factor(ev, Figure::Whole, r, &on));
        }
        None => out.not_applied = Some(why.to_string()),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::TokenParts;

    fn s(v: f64) -> Option<Sourced> {
        Some(Sourced {
            value: v,
            source: "test".into(),
        })
    }

    fn run(arm: Arm, pair: u32, spt: f64, trunk: f64, expert: f64) -> LeverRun {
        LeverRun {
            arm,
            pair_index: pair,
            seconds_per_token: spt,
            parts: TokenParts {
                trunk_seconds_per_token: Some(trunk),
                expert_seconds_per_token: Some(expert),
                far_hit_share: Some(0.1),
                draft_acceptance: None,
            },
        }
    }

    fn evidence(menu: MenuId, runs: &[LeverRun]) -> LeverEvidence {
        LeverEvidence::from_runs(
            menu,
            Sourced {
                value: -0.1,
                source: "win".into(),
            },
            ExperimentId(7),
            runs,
        )
    }

    #[test]
    fn no_live_speed_no_number() {
        let p = project(&Parts::default(), &[], &[]);
        assert_eq!(p.projected, None);
    }

    #[test]
    fn no_baseline_run_yet_is_not_a_bench_that_lacks_the_part() {
        // Nothing measured the live profile yet: every part says so, and
        // none blames the bench.
        let p = project(&Parts::default(), &[], &[]);
        for part in &p.parts[1..3] {
            let why = part.measured.as_ref().unwrap_err();
            assert!(
                why.contains("no baseline run of the live profile")
                    && !why.contains("does not report"),
                "{}: {why}",
                part.name
            );
        }
        // Measured runs that carry no parts: the bench does not report them.
        let measured = Parts {
            live: s(2.0),
            ..Parts::default()
        };
        let p = project(&measured, &[], &[]);
        let why = p.parts[1].measured.as_ref().unwrap_err();
        assert!(
            why.contains("trunk_seconds_per_token") && why.contains("does not report"),
            "{why}"
        );
    }

    #[test]
    fn ratios_are_paired_medians() {
        let runs = [
            run(Arm::Baseline, 0, 2.0, 0.5, 1.0),
            run(Arm::Candidate, 0, 1.8, 0.5, 0.8),
            run(Arm::Candidate, 1, 1.6, 0.5, 0.6),
            run(Arm::Baseline, 1, 2.0, 0.5, 1.0),
            // A pair with one arm only does not count.
            run(Arm::Baseline, 2, 9.0, 9.0, 9.0),
        ];
        let r = Ratio::paired(&runs, |r| r.parts.expert_seconds_per_token).unwrap();
        assert_eq!(r.pairs, 2);
        assert!((r.value - 0.7).abs() < 1e-12, "{r:?}");
        assert_eq!((r.baseline, r.candidate), (1.0, 0.7));
        assert_eq!(
            Ratio::paired(&runs[4..], |r| Some(r.seconds_per_token)),
            None
        );
    }

    #[test]
    fn levers_multiply_their_terms_and_speculation_the_whole() {
        let parts = Parts {
            live: s(2.0),
            trunk: s(0.5),
            expert: s(1.4),
            ..Parts::default()
        };
        let pins = evidence(
            MenuId::RerankPins,
            &[
                run(Arm::Baseline, 0, 2.0, 0.5, 1.0),
                run(Arm::Candidate, 0, 1.5, 0.5, 0.5),
            ],
        );
        let rebalance = evidence(
            MenuId::RebalanceTrunkCache,
            &[
                run(Arm::Baseline, 0, 2.0, 0.5, 1.0),
                run(Arm::Candidate, 0, 1.9, 0.25, 1.2),
            ],
        );
        let spec = evidence(
            MenuId::StageSpeculative,
            &[
                run(Arm::Baseline, 0, 2.0, 0.5, 1.0),
                run(Arm::Candidate, 0, 1.6, 0.5, 1.0),
            ],
        );
        let p = project(&parts, &[pins, rebalance, spec], &[]);
        // R = 2.0 − 0.5 − 1.4 = 0.1; T × 0.5; E × 0.5 × 1.2; whole × 0.8.
        let want = (0.5 * 0.5 + 1.4 * 0.5 * 1.2 + 0.1) * 0.8;
        let got = p.projected.unwrap();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        let a = p.arithmetic.unwrap();
        assert!(
            a.contains("[rerank_pins]") && a.contains("[stage_speculative]"),
            "{a}"
        );
        let warm = p
            .levers
            .iter()
            .find(|l| l.menu == MenuId::DeepenWarmSet)
            .unwrap();
        assert!(warm.factors.is_empty() && warm.not_applied.is_some());
        let pins = p
            .levers
            .iter()
            .find(|l| l.menu == MenuId::RerankPins)
            .unwrap();
        assert!(pins.factors[0].source.contains("experiment #7"), "{pins:?}");
        assert!(pins.state[0].contains("far-tier hit share"), "{pins:?}");
    }

    /// The real engines report no trunk or expert term, and a draft
    /// acceptance of 0 with speculation off. A confirmed rebalance win that
    /// waits for approval still moves the projection (by its measured
    /// whole-token ratio), and its state shows no draft acceptance.
    #[test]
    fn a_waiting_rebalance_win_moves_the_projection_of_a_stack_without_terms() {
        let parts = Parts {
            live: s(2.0),
            acceptance: s(0.0),
            ..Parts::default()
        };
        let engine = |arm, pair, spt| LeverRun {
            arm,
            pair_index: pair,
            seconds_per_token: spt,
            parts: TokenParts {
                draft_acceptance: Some(0.0),
                ..TokenParts::default()
            },
        };
        let rebalance = evidence(
            MenuId::RebalanceTrunkCache,
            &[
                engine(Arm::Baseline, 0, 2.0),
                engine(Arm::Candidate, 0, 1.5),
                engine(Arm::Candidate, 1, 1.6),
                engine(Arm::Baseline, 1, 2.0),
            ],
        );
        let p = project(&parts, &[rebalance], &[]);
        let want = 2.0 * 0.775;
        let got = p.projected.unwrap();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}: {p:#?}");
        let lever = p
            .levers
            .iter()
            .find(|l| l.menu == MenuId::RebalanceTrunkCache)
            .unwrap();
        assert_eq!(lever.not_applied, None, "{lever:?}");
        assert_eq!(lever.factors.len(), 1, "{lever:?}");
        assert_eq!(lever.factors[0].figure, Figure::Whole);
        assert!(
            lever.factors[0]
                .source
                .contains("on the whole token: the live profile's T and E not measured"),
            "{lever:?}"
        );
        assert!(
            lever.state.iter().all(|l| !l.contains("draft acceptance")),
            "{lever:?}"
        );
        assert!(p.arithmetic.unwrap().contains("[rebalance_trunk_cache]"));
    }

    #[test]
    fn a_lever_shows_only_the_state_it_moves() {
        let parts = Parts {
            live: s(2.0),
            trunk: s(0.5),
            expert: s(1.4),
            ..Parts::default()
        };
        let both = |arm, spt| LeverRun {
            arm,
            pair_index: 0,
            seconds_per_token: spt,
            parts: TokenParts {
                trunk_seconds_per_token: Some(0.5),
                expert_seconds_per_token: Some(1.0),
                far_hit_share: Some(0.2),
                draft_acceptance: Some(0.6),
            },
        };
        let runs = [both(Arm::Baseline, 2.0), both(Arm::Candidate, 1.8)];
        let p = project(
            &parts,
            &[
                evidence(MenuId::RebalanceTrunkCache, &runs),
                evidence(MenuId::StageSpeculative, &runs),
            ],
            &[],
        );
        let state = |m| &p.levers.iter().find(|l| l.menu == m).unwrap().state;
        assert_eq!(
            state(MenuId::RebalanceTrunkCache),
            &vec!["far-tier hit share 0.200 → 0.200".to_string()]
        );
        assert_eq!(
            state(MenuId::StageSpeculative),
            &vec!["draft acceptance 0.600 → 0.600".to_string()]
        );
    }

    #[test]
    fn without_terms_a_term_lever_multiplies_the_whole_token_and_says_why() {
        let parts = Parts {
            live: s(2.0),
            ..Parts::default()
        };
        let bare = |arm, pair, spt| LeverRun {
            arm,
            pair_index: pair,
            seconds_per_token: spt,
            parts: TokenParts::default(),
        };
        let pins = evidence(
            MenuId::RerankPins,
            &[bare(Arm::Baseline, 0, 2.0), bare(Arm::Candidate, 0, 1.0)],
        );
        let spec = evidence(
            MenuId::StageSpeculative,
            &[bare(Arm::Baseline, 0, 2.0), bare(Arm::Candidate, 0, 1.5)],
        );
        let p = project(&parts, &[pins, spec], &[]);
        // L × pins' whole-token ratio 0.5 × speculation's 0.75.
        assert!((p.projected.unwrap() - 0.75).abs() < 1e-9, "{p:#?}");
        let pins = &p.levers[0];
        assert_eq!(pins.not_applied, None, "{pins:?}");
        assert_eq!(pins.factors[0].figure, Figure::Whole, "{pins:?}");
        assert!(
            pins.factors[0].source.contains("T and E not measured"),
            "{pins:?}"
        );
        assert!(p.arithmetic.unwrap().contains("T and E not measured"));
    }

    #[test]
    fn a_lever_whose_runs_lack_its_term_says_so_by_name() {
        let parts = Parts {
            live: s(2.0),
            trunk: s(0.5),
            expert: s(1.4),
            ..Parts::default()
        };
        let bare = |arm| LeverRun {
            arm,
            pair_index: 0,
            seconds_per_token: 1.0,
            parts: TokenParts::default(),
        };
        let warm = evidence(
            MenuId::DeepenWarmSet,
            &[bare(Arm::Baseline), bare(Arm::Candidate)],
        );
        let p = project(&parts, &[warm], &[]);
        // Its whole-token ratio (1.0 / 1.0) stands in, saying why.
        assert!((p.projected.unwrap() - 2.0).abs() < 1e-9);
        let warm = &p.levers[1];
        assert_eq!(warm.factors.len(), 1, "{warm:?}");
        let why = &warm.factors[0].source;
        assert!(
            why.contains("#7") && why.contains("expert_seconds_per_token"),
            "{why}"
        );
    }
}
