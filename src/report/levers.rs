//! What the period's wins came to: which first-A/B wins a confirmation
//! judged or refuted ([`Confirmations`]), and each lever's best measured
//! effect on the live base, the projection's evidence ([`lever_bests`]).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::RefutedWin;
use super::projection::{Sourced, Term};
use crate::ledger::{ExperimentId, ReportStage, ReportVerdict};
use crate::menu::MenuId;
use crate::vocab::{Digest, VerdictKind};

/// How many refused deltas, mismatches and failure examples to list.
/// What the confirming A/Bs decided about the period's first-A/B wins, by
/// the end of the period (a confirmation decided later is still pending,
/// as a stage decided later is still open).
#[derive(Debug, Default)]
pub(super) struct Confirmations {
    /// Wins a confirmation judged: won again (then staged) or refuted.
    pub(super) judged: BTreeSet<ExperimentId>,
    /// Wins a confirmation refuted (a loss, within noise, inconclusive, a
    /// hash mismatch), by the win's experiment.
    pub(super) refuted: BTreeMap<ExperimentId, RefutedWin>,
}

impl Confirmations {
    pub(super) fn of(verdicts: &[ReportVerdict], end: DateTime<Utc>) -> Confirmations {
        let wins: BTreeMap<ExperimentId, &ReportVerdict> = verdicts
            .iter()
            .filter(|v| v.kind == VerdictKind::Win && v.confirmation_of.is_none())
            .filter_map(|v| v.experiment_id.map(|e| (e, v)))
            .collect();
        let mut c = Confirmations::default();
        for v in verdicts {
            let (Some(first), Some(id)) = (v.confirmation_of, v.experiment_id) else {
                continue;
            };
            // A failed confirmation judged nothing: the daemon confirms again.
            if v.decided_at >= end || v.kind == VerdictKind::Failed {
                continue;
            }
            c.judged.insert(first);
            if v.kind == VerdictKind::Win {
                continue;
            }
            // A win of an earlier period is that period's business.
            let Some(won) = wins.get(&first) else {
                continue;
            };
            if let (Some(menu), Some(effect)) = (won.menu_id, won.effect) {
                c.refuted.insert(
                    first,
                    RefutedWin {
                        experiment: first,
                        menu,
                        effect,
                        base_digest: won.base_digest.clone(),
                        confirmation: id,
                        verdict: v.kind,
                        confirmation_effect: v.effect,
                    },
                );
            }
        }
        c
    }

    pub(super) fn refuted(&self, id: ExperimentId) -> bool {
        self.refuted.contains_key(&id)
    }
}

/// Each lever's best measured effect on the live base: its best open stage
/// (a confirmed effect) if it has one, else its best first-A/B win whose
/// confirmation is still pending (one its confirmation refuted is no lever;
/// one it confirmed is its stage's business).
pub(super) fn lever_bests(
    verdicts: &[ReportVerdict],
    open: &[ReportStage],
    live_base: Option<&Digest>,
    refused: &BTreeSet<ExperimentId>,
    confirmations: &Confirmations,
) -> Vec<(MenuId, Sourced, ExperimentId)> {
    let Some(live_base) = live_base else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for &menu in MenuId::ALL {
        if Term::of(menu).is_none() {
            continue;
        }
        let staged = open
            .iter()
            .filter(|s| s.menu_id == menu && &s.base_digest == live_base)
            // A composite's effect is no single lever's.
            .filter(|s| s.parts.is_empty())
            .min_by(|a, b| a.effect.total_cmp(&b.effect))
            .map(|s| {
                let best = Sourced {
                    value: s.effect,
                    source: format!(
                        "stage #{} (win #{} confirmed by experiment #{})",
                        s.id, s.experiment_id, s.confirmation_id
                    ),
                };
                // The confirming A/B's runs: not selected for being good.
                (best, s.confirmation_id)
            });
        let won = || {
            verdicts
                .iter()
                .filter(|v| {
                    v.kind == VerdictKind::Win
                        && v.menu_id == Some(menu)
                        && v.confirmation_of.is_none()
                        && v.base_digest.as_ref() == Some(live_base)
                        && v.experiment_id.is_none_or(|e| {
                            !refused.contains(&e) && !confirmations.judged.contains(&e)
                        })
                })
                .filter_map(|v| v.effect.zip(v.experiment_id))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(e, id)| {
                    let best = Sourced {
                        value: e,
                        source: format!(
                            "win verdict of experiment #{id} (first A/B, confirmation pending: optimistic)"
                        ),
                    };
                    (best, id)
                })
        };
        if let Some((best, id)) = staged.or_else(won) {
            out.push((menu, best, id));
        }
    }
    out
}
