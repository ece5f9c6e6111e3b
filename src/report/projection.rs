//! The projection, labelled as one: the seconds per token the live profile
//! would reach if every remaining lever reached its measured best. Every
//! figure it uses carries its source (an observation, runs, a verdict, a
//! stage); a figure the ledger does not hold is reported missing, never
//! guessed.
//!
//! # The model
//!
//! ```text
//! projected = (L − min(S_pins + S_warm, E) − min(S_trunk, T)) × exp(e_spec)
//! S_x       = L × (1 − exp(e_x))            (a lever's measured saving)
//! S_warm   ≤ h × E                          (the warm set only serves far-tier traffic)
//! ```
//!
//! - `L`: the live profile's measured seconds per token (median of its
//!   baseline runs in the period);
//! - `T`, `E`: the trunk and expert terms of a token, observed metrics
//!   `trunk_seconds_per_token` and `expert_seconds_per_token`;
//! - `h`: the far tier's share of expert requests, observed `far_hit_share`;
//! - `e_x`: the best (most negative) measured effect of lever `x` on the live
//!   base, a log ratio: a stage's confirmation when there is one (unbiased),
//!   else a first A/B win (optimistic: it was selected for being good);
//! - speculation (`stage_speculative`) scales every term, so its factor
//!   multiplies; the observed acceptance (`draft_accepted / draft_proposed`)
//!   is shown as the state of that lever.
//!
//! Assumptions, stated in the report: levers act on their own terms and
//! compose; a term cannot fall below zero (hence the caps, applied only when
//! the term is measured).

use serde::Serialize;

use crate::menu::MenuId;

/// Observed metric names the projection reads from the ledger's observations
/// (the names on the left of `[stack.metrics.names]` in config.toml).
pub const TRUNK_METRIC: &str = "trunk_seconds_per_token";
pub const EXPERT_METRIC: &str = "expert_seconds_per_token";
pub const FAR_SHARE_METRIC: &str = "far_hit_share";
pub const DRAFT_ACCEPTED_METRIC: &str = "draft_accepted";
pub const DRAFT_PROPOSED_METRIC: &str = "draft_proposed";

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

/// The measured parts, as the builder found them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Parts {
    pub live: Option<Sourced>,
    pub trunk: Option<Sourced>,
    pub expert: Option<Sourced>,
    pub far_share: Option<Sourced>,
    pub acceptance: Option<Sourced>,
}

/// Which term a lever acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Term {
    Expert,
    Trunk,
    /// Every term (speculation divides the cost of each token).
    Whole,
}

impl Term {
    pub fn of(menu: MenuId) -> Option<Term> {
        match menu {
            MenuId::RerankPins | MenuId::DeepenWarmSet => Some(Term::Expert),
            MenuId::RebalanceTrunkCache => Some(Term::Trunk),
            MenuId::StageSpeculative => Some(Term::Whole),
            MenuId::Remeasure => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Term::Expert => "expert term",
            Term::Trunk => "trunk term",
            Term::Whole => "every term",
        }
    }
}

/// One lever's contribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lever {
    pub menu: MenuId,
    pub term: Term,
    /// Its best measured effect (log ratio) with its source; `None` when it
    /// has no measured win on the live base.
    pub best: Option<Sourced>,
    /// Seconds per token it removes (or, for speculation, the factor).
    pub saving: Option<f64>,
    /// Why its saving was capped, if it was.
    pub capped: Option<String>,
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

fn part(name: &'static str, v: &Option<Sourced>, missing: &str) -> Part {
    Part {
        name,
        measured: v.clone().ok_or_else(|| missing.to_string()),
    }
}

/// Computes the projection from the measured parts and each lever's best.
pub fn project(parts: &Parts, best: &[(MenuId, Sourced)]) -> Projection {
    let observed =
        |m: &str| format!("not in the ledger: no observation in the period carries `{m}`");
    let shown = vec![
        part(
            "live seconds per token (L)",
            &parts.live,
            "not in the ledger: no measured baseline run in the period",
        ),
        part("trunk term (T)", &parts.trunk, &observed(TRUNK_METRIC)),
        part("expert term (E)", &parts.expert, &observed(EXPERT_METRIC)),
        part(
            "far-tier hit share (h)",
            &parts.far_share,
            &observed(FAR_SHARE_METRIC),
        ),
        part(
            "speculation acceptance",
            &parts.acceptance,
            &format!(
                "not in the ledger: no observation in the period carries `{DRAFT_ACCEPTED_METRIC}` and a non-zero `{DRAFT_PROPOSED_METRIC}`"
            ),
        ),
    ];
    let mut levers: Vec<Lever> = MenuId::ALL
        .iter()
        .filter_map(|&m| {
            Term::of(m).map(|term| Lever {
                menu: m,
                term,
                best: best.iter().find(|(b, _)| *b == m).map(|(_, s)| s.clone()),
                saving: None,
                capped: None,
            })
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
    let l = live.value;
    let e = parts.expert.as_ref().map(|s| s.value);
    let t = parts.trunk.as_ref().map(|s| s.value);
    let h = parts.far_share.as_ref().map(|s| s.value);
    let mut spec = 1.0;
    for lever in &mut levers {
        let Some(b) = &lever.best else { continue };
        if lever.term == Term::Whole {
            spec = b.value.exp();
            lever.saving = Some(spec);
            continue;
        }
        let mut s = l * (1.0 - b.value.exp());
        if lever.menu == MenuId::DeepenWarmSet
            && let (Some(e), Some(h)) = (e, h)
            && s > h * e
        {
            s = h * e;
            lever.capped = Some(format!("capped at h × E = {:.4} s", h * e));
        }
        lever.saving = Some(s);
    }
    let sum = |term: Term| -> f64 {
        levers
            .iter()
            .filter(|lv| lv.term == term)
            .filter_map(|lv| lv.saving)
            // `+ 0.0` turns the empty sum's -0.0 into 0.0 for display.
            .sum::<f64>()
            + 0.0
    };
    let (mut s_expert, mut s_trunk) = (sum(Term::Expert), sum(Term::Trunk));
    let mut notes = Vec::new();
    if let Some(e) = e
        && s_expert > e
    {
        notes.push(format!("expert savings capped at E = {e:.4} s"));
        s_expert = e;
    }
    if let Some(t) = t
        && s_trunk > t
    {
        notes.push(format!("trunk savings capped at T = {t:.4} s"));
        s_trunk = t;
    }
    let projected = ((l - s_expert - s_trunk) * spec).max(0.0);
    let mut arithmetic = format!(
        "(L {l:.4} − expert savings {s_expert:.4} − trunk savings {s_trunk:.4}) × speculation factor {spec:.4} = {projected:.4} s/token"
    );
    if !notes.is_empty() {
        arithmetic.push_str(&format!(" ({})", notes.join("; ")));
    }
    Projection {
        parts: shown,
        levers,
        projected: Some(projected),
        arithmetic: Some(arithmetic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: f64) -> Option<Sourced> {
        Some(Sourced {
            value: v,
            source: "test".into(),
        })
    }

    #[test]
    fn no_live_speed_no_number() {
        let p = project(&Parts::default(), &[]);
        assert_eq!(p.projected, None);
        assert!(
            p.parts[1]
                .measured
                .as_ref()
                .unwrap_err()
                .contains(TRUNK_METRIC)
        );
    }

    #[test]
    fn savings_add_within_their_terms_and_speculation_multiplies() {
        let parts = Parts {
            live: s(2.0),
            trunk: s(0.5),
            expert: s(1.5),
            far_share: s(0.1),
            acceptance: None,
        };
        let best = [
            (
                MenuId::RerankPins,
                Sourced {
                    value: (0.9f64).ln(),
                    source: "a".into(),
                },
            ),
            (
                MenuId::DeepenWarmSet,
                Sourced {
                    value: (0.8f64).ln(),
                    source: "b".into(),
                },
            ),
            (
                MenuId::StageSpeculative,
                Sourced {
                    value: (0.5f64).ln(),
                    source: "c".into(),
                },
            ),
        ];
        let p = project(&parts, &best);
        // pins save 0.2; warm would save 0.4 but is capped at h·E = 0.15.
        let got = p.projected.unwrap();
        assert!((got - (2.0 - 0.2 - 0.15) * 0.5).abs() < 1e-9, "{got}");
        assert!(p.levers.iter().any(|l| l.capped.is_some()));
    }

    #[test]
    fn expert_savings_never_exceed_the_expert_term() {
        let parts = Parts {
            live: s(1.0),
            expert: s(0.1),
            ..Parts::default()
        };
        let best = [(
            MenuId::RerankPins,
            Sourced {
                value: (0.5f64).ln(),
                source: "a".into(),
            },
        )];
        assert!((project(&parts, &best).projected.unwrap() - 0.9).abs() < 1e-9);
    }
}
