//! What the daemon's metrics endpoint says of realizations: the stack's
//! applied stages by what they realized on the live server (`win`,
//! `within_noise`, `loss`, or not yet), and the latest realized stage's
//! claim beside its realized effect.

use std::collections::BTreeMap;

use crate::ledger::{Ledger, Realized, StageId, StageRealization, StageSummary};
use crate::vocab::{StageState, VerdictKind};

/// The stack's applied stages by what they realized, and the latest
/// realized one's claim beside its realization.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Realizations {
    pub win: u64,
    pub within_noise: u64,
    pub loss: u64,
    /// Applied, not realized (yet, or given up).
    pub unrealized: u64,
    /// The latest realization: (stage, claimed log ratio, realized log ratio).
    pub latest: Option<(u64, f64, f64)>,
}

impl Realizations {
    /// Tallies the approved stages (`approved`) with their realizations.
    pub fn tally(
        approved: &[StageSummary],
        realized: &BTreeMap<StageId, StageRealization>,
    ) -> Realizations {
        let mut t = Realizations::default();
        let none = StageRealization::default();
        let mut latest = None;
        for s in approved {
            match realized
                .get(&s.id)
                .unwrap_or(&none)
                .of(s.applied_at.is_some())
            {
                Realized::NotApplied => {}
                Realized::Measured(a) => {
                    match a.verdict {
                        Some(VerdictKind::Win) => t.win += 1,
                        Some(VerdictKind::Loss) => t.loss += 1,
                        _ => t.within_noise += 1,
                    }
                    if let Some(e) = a.effect
                        && latest.is_none_or(|(at, _)| a.decided_at > at)
                    {
                        latest = Some((a.decided_at, (s.id.0.max(0) as u64, s.effect, e)));
                    }
                }
                Realized::Measuring | Realized::GivenUp(_) | Realized::Waiting(_) => {
                    t.unrealized += 1;
                }
            }
        }
        t.latest = latest.map(|(_, l)| l);
        t
    }

    /// The counts by outcome, as the endpoint labels them.
    pub fn by_outcome(&self) -> [(&'static str, u64); 4] {
        [
            ("win", self.win),
            ("within_noise", self.within_noise),
            ("loss", self.loss),
            ("unrealized", self.unrealized),
        ]
    }

    /// Reads them from the ledger (this handle's stack's stages).
    pub async fn read(ledger: &Ledger) -> Result<Realizations, crate::ledger::LedgerError> {
        let approved = ledger.stages(Some(StageState::Approved)).await?;
        let realized = ledger.realizations().await?;
        Ok(Realizations::tally(&approved, &realized))
    }
}

/// The realization families of the metrics endpoint, declared from the
/// first scrape: the latest realized stage's claim beside its realized
/// effect, and the applied stages by what they realized.
pub fn render(out: &mut String, r: Option<&Realizations>) {
    use std::fmt::Write as _;
    let latest = r.and_then(|r| r.latest);
    for (name, help, v) in [
        (
            "orchestrator_last_realized_stage",
            "The approved stage realized last (its id).",
            latest.map(|l| l.0 as f64),
        ),
        (
            "orchestrator_last_realized_claimed_log_ratio",
            "Its claimed effect: log ratio of seconds per token, candidate/replaced (negative is faster).",
            latest.map(|l| l.1),
        ),
        (
            "orchestrator_last_realized_log_ratio",
            "Its realized effect on the live server against a shadow of the replaced profile (log ratio).",
            latest.map(|l| l.2),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        if let Some(v) = v {
            let _ = writeln!(out, "{name} {v}");
        }
    }
    let _ = writeln!(
        out,
        "# HELP orchestrator_stages_realized Applied stages by what they realized on the live server (unrealized: not measured yet, or given up).\n# TYPE orchestrator_stages_realized gauge"
    );
    if let Some(r) = r {
        for (outcome, n) in r.by_outcome() {
            let _ = writeln!(
                out,
                "orchestrator_stages_realized{{outcome=\"{outcome}\"}} {n}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::prometheus;

    /// Applied stages are counted by what they realized; an approved stage
    /// never applied is not; the latest realized one's claim and effect
    /// are exposed side by side.
    #[test]
    fn stages_are_tallied_by_what_they_realized() {
        use crate::ledger::{Interval, RealizationAttempt};
        let t0 = chrono::Utc::now();
        let stage = |id: i64, applied: bool| StageSummary {
            id: StageId(id),
            state: StageState::Approved,
            menu_id: crate::menu::MenuId::RebalanceTrunkCache,
            parameters: serde_json::json!({}),
            effect: -0.2,
            interval: Interval {
                low: -0.3,
                high: -0.1,
            },
            noise_floor: 0.02,
            floor_is_bound: false,
            created_at: t0,
            base_digest: crate::vocab::Digest::of(b"base"),
            decided_at: Some(t0),
            decided_by: Some("ada".into()),
            parts: vec![],
            stack: Some("tinyk3".into()),
            applied_at: applied.then_some(t0),
            apply_refusal: None,
            confirmed_by_stack: None,
            confirmed_in_class: None,
        };
        let attempt = RealizationAttempt::example;
        let of = |a: RealizationAttempt| StageRealization {
            attempts: vec![a],
            note: None,
        };
        let approved = [
            stage(1, true),
            stage(2, true),
            stage(3, true),
            stage(4, false),
        ];
        let realized = [
            (StageId(1), of(attempt(1, VerdictKind::Win, -0.15, 10))),
            (StageId(2), of(attempt(2, VerdictKind::Loss, 0.12, 20))),
        ]
        .into_iter()
        .collect();
        let t = Realizations::tally(&approved, &realized);
        assert_eq!((t.win, t.within_noise, t.loss, t.unrealized), (1, 0, 1, 1));
        assert_eq!(t.latest, Some((2, -0.2, 0.12)));
        let m =
            super::super::metrics::DaemonMetrics::new(1.0, crate::progress::Progress::default());
        m.set_realizations(t);
        let samples = prometheus::parse(&m.render()).unwrap();
        let realized = |outcome: &str| {
            samples
                .iter()
                .find(|s| {
                    s.name == "orchestrator_stages_realized" && s.labels["outcome"] == outcome
                })
                .map(|s| s.value)
        };
        assert_eq!(realized("loss"), Some(1.0));
        assert_eq!(realized("unrealized"), Some(1.0));
        assert_eq!(realized("within_noise"), Some(0.0));
        let get = |n: &str| prometheus::value(&samples, n);
        assert_eq!(get("orchestrator_last_realized_stage"), Some(2.0));
        assert_eq!(
            get("orchestrator_last_realized_claimed_log_ratio"),
            Some(-0.2)
        );
        assert_eq!(get("orchestrator_last_realized_log_ratio"), Some(0.12));
    }
}
