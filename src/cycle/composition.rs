//! A composition cycle: when confirmed wins on different menu entries are
//! staged against the live profile, their combined candidate
//! ([`crate::plan::compose`]) is measured against the live profile. It is
//! built from ledger rows only (the staged candidates), never from anything
//! a proposer wrote.
//!
//! A composite that wins and beats its best part is confirmed like any win
//! (the next cycle, [`super::confirmation`]) and staged as one stage that
//! names its parts. "Beats" ([`beats`]): the composite's interval lies
//! wholly below the best part's confirmed effect, at its first A/B and
//! again at its independent confirmation.

use std::collections::BTreeSet;

use serde_json::json;

use super::experiment::Origin;
use super::outcome::{Done, Judged, Tried};
use super::{CycleRunner, Stop, no_scorer, profiles_dir};
use crate::brain::Proposer;
use crate::clock::Clock;
use crate::ledger::{
    Composition, CycleId, ExperimentId, Interval, LedgerError, NewComposition, NewVerdict, StageId,
};
use crate::measure::preflight;
use crate::measure::scorer::Scorer;
use crate::menu::MenuId;
use crate::observe::Observation;
use crate::plan::compose::{self, Part};
use crate::plan::{self, PinList, PlanContext};
use crate::profile::{Profile, ProfileFile};
use crate::vocab::{Method, Scheduled, StageState, VerdictKind};

/// A staged single win on the live profile, as a composition reads it.
#[derive(Debug, Clone)]
pub(super) struct Single {
    pub stage: StageId,
    pub menu_id: MenuId,
    /// The confirmation's effect (log ratio; negative is faster).
    pub effect: f64,
    pub method: Method,
    pub candidate: Profile,
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The staged wins to combine next on the live profile, best first, when
    /// a combination of two or more is due.
    pub(super) async fn composition_due(
        &self,
        base: &ProfileFile,
    ) -> Result<Option<Vec<Single>>, LedgerError> {
        let digest = base.profile.digest();
        let staged: Vec<_> = self
            .ledger
            .stages(Some(StageState::Staged))
            .await?
            .into_iter()
            .filter(|s| s.base_digest == digest)
            .collect();
        let composites: Vec<BTreeSet<StageId>> = staged
            .iter()
            .filter(|s| !s.parts.is_empty())
            .map(|s| s.parts.iter().map(|p| p.stage_id).collect())
            .collect();
        let singles: Vec<(StageId, MenuId, f64)> = staged
            .iter()
            .filter(|s| s.parts.is_empty())
            .map(|s| (s.id, s.menu_id, s.effect))
            .collect();
        let tried: Vec<BTreeSet<StageId>> = self
            .ledger
            .compositions_on(&digest)
            .await?
            .into_iter()
            .map(|c| c.parts.into_iter().collect())
            .collect();
        let Some(chosen) = choose(&singles, &tried, &composites) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(chosen.len());
        for id in chosen {
            let stage = self.ledger.stage(id).await?;
            let experiment = self.ledger.experiment(stage.experiment_id).await?;
            // A stored profile that no longer parses cannot be combined;
            // the stage itself says so when a person shows it.
            let Ok(candidate) = Profile::parse(
                &stage.candidate_profile,
                std::path::Path::new("a staged candidate"),
            ) else {
                tracing::warn!(%id, "a staged candidate does not parse; not composing it");
                return Ok(None);
            };
            out.push(Single {
                stage: id,
                menu_id: experiment.menu_id,
                effect: stage.effect,
                method: experiment.method,
                candidate,
            });
        }
        Ok(Some(out))
    }

    /// Builds, records and measures the composite of `parts` (best first);
    /// a refused combination is recorded with its reason, once.
    pub(super) async fn compose(
        &mut self,
        id: CycleId,
        parts: Vec<Single>,
        base: &ProfileFile,
        obs: &Observation,
    ) -> Result<Done, Stop> {
        let cfg = self.config;
        let ids: Vec<StageId> = parts.iter().map(|p| p.stage).collect();
        let lead = parts[0].menu_id;
        let tried = Tried::experiment(Some(Scheduled::Composition), lead, json!({ "parts": ids }));
        let labels: Vec<String> = parts
            .iter()
            .map(|p| format!("stage #{} ({})", p.stage, p.menu_id))
            .collect();
        let named = labels.join(" + ");
        let pins = base
            .profile
            .pins_path(&base.path)
            .and_then(|p| PinList::load(&p).ok());
        let dir = profiles_dir(&cfg.stack.live_profile);
        let top_k = self.declared_top_k();
        let ctx = PlanContext {
            live: &base.profile,
            live_path: &base.path,
            profiles_dir: &dir,
            expert_bytes: cfg.stack.expert_bytes,
            cache_spare_slots: cfg.stack.cache_spare_slots,
            heat: obs.heat.as_ref(),
            trace: obs.trace.as_ref(),
            current_pins: pins.as_ref(),
            top_k: top_k.as_ref().map(|(k, from)| (*k, from.as_str())),
            menu: Some(self.menu),
        };
        let as_parts: Vec<Part<'_>> = parts
            .iter()
            .zip(&labels)
            .map(|(p, label)| Part {
                label,
                menu_id: p.menu_id,
                candidate: &p.candidate,
            })
            .collect();
        let method = parts[0].method;
        let plan = if parts.iter().any(|p| p.method != method) {
            Err(format!(
                "its parts were measured with different protocols ({}); a composite is measured \
                 with one",
                parts
                    .iter()
                    .map(|p| p.method.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        } else {
            compose::compose(&ctx, &as_parts).map_err(|e| e.to_string())
        };
        let plan = plan.and_then(|plan| {
            preflight::check(&plan.candidate, cfg.measure.memory_headroom_gb)
                .map_err(|e| format!("the memory pre-flight rejects the combined profile: {e}"))?;
            if let Some(pins) = plan.candidate.pins_path(&plan.candidate_path)
                && !pins.exists()
            {
                return Err(format!(
                    "the pin list {} a part names is missing; reject that stage and let the loop \
                     plan it again",
                    pins.display()
                ));
            }
            Ok(plan)
        });
        let plan = match plan {
            Ok(plan) => plan,
            Err(why) => {
                let why = format!("composition of {named} not measured: {why}");
                self.ledger
                    .insert_composition(&NewComposition {
                        cycle_id: id,
                        created_at: self.clock.now(),
                        base_digest: base.profile.digest(),
                        experiment_id: None,
                        refusal: Some(why.clone()),
                        parts: ids,
                    })
                    .await?;
                let v = NewVerdict::refusal(VerdictKind::Rejected, &why, self.clock.now());
                self.ledger.insert_cycle_verdict(id, &v).await?;
                return Ok(Done::new(
                    tried,
                    Judged::refusal(VerdictKind::Rejected, &why),
                ));
            }
        };
        plan::write_plan(&plan).map_err(|e| {
            Stop::failed(format!(
                "writing the combined candidate {}: {e}",
                plan.candidate_path.display()
            ))
            .during(&tried)
        })?;
        let candidate = ProfileFile {
            path: plan.candidate_path.clone(),
            profile: plan.candidate.clone(),
        };
        let scorer = self
            .scorers
            .for_candidate(method)
            .ok_or_else(|| Stop::failed(no_scorer(method)).during(&tried))?;
        let experiment_id = self
            .ledger
            .insert_experiment(&self.new_experiment(
                id,
                Origin::Composition {
                    lead,
                    parts: &ids,
                    notes: &plan.notes,
                },
                scorer.method(),
                &base.profile,
                &candidate.profile,
            ))
            .await?;
        let composition = self
            .ledger
            .insert_composition(&NewComposition {
                cycle_id: id,
                created_at: self.clock.now(),
                base_digest: base.profile.digest(),
                experiment_id: Some(experiment_id),
                refusal: None,
                parts: ids,
            })
            .await?;
        let judged = self
            .ab(id, experiment_id, &tried, base, &candidate, &scorer, None)
            .await?;
        if judged.verdict == VerdictKind::Win
            && let Some((_, interval)) = judged.effect
        {
            let best = &parts[0];
            if let Err(why) = beats(interval, best.effect, best.stage) {
                tracing::info!(experiment = %experiment_id, "{why}");
                self.ledger.refuse_composition(composition, &why).await?;
            }
        }
        let tried = Tried {
            experiment_id: Some(experiment_id),
            ..tried
        };
        Ok(Done::new(tried, judged))
    }

    /// Whether the composite measured by `first` may be staged on its
    /// confirmation's `interval`: it beats its best part again and every
    /// part is still staged. Records why not.
    pub(super) async fn composite_stageable(
        &self,
        c: &Composition,
        interval: Interval,
    ) -> Result<bool, LedgerError> {
        let mut best: Option<(f64, StageId)> = None;
        for &part in &c.parts {
            let stage = self.ledger.stage(part).await?;
            if stage.state != StageState::Staged {
                let why = format!(
                    "its part stage #{part} is {} since; the composite is not staged",
                    stage.state
                );
                self.ledger.refuse_composition(c.id, &why).await?;
                return Ok(false);
            }
            if best.is_none_or(|(e, _)| stage.effect < e) {
                best = Some((stage.effect, part));
            }
        }
        let Some((effect, stage)) = best else {
            return Ok(false);
        };
        if let Err(why) = beats(interval, effect, stage) {
            let why = format!("confirmation: {why}");
            tracing::info!("{why}");
            self.ledger.refuse_composition(c.id, &why).await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// The composition `first` measured, when it was refused after its A/B.
    pub(super) async fn refused_composite(&self, first: ExperimentId) -> Result<bool, LedgerError> {
        Ok(self
            .ledger
            .composition_of(first)
            .await?
            .is_some_and(|c| c.refusal.is_some()))
    }
}

/// Whether a composite beats its best part: the composite's interval (the
/// sequential test's, valid at its stopping time, vs the live profile)
/// lies wholly below the best part's confirmed effect (its independent
/// confirmation, vs the same live profile).
///
/// Why this rule: the part's confirmed effect is the unbiased estimate of
/// it (not selected for being good), and the composite is required to beat
/// it twice, at its first A/B and at its own confirmation, so a composite
/// that only equals its best part passes both only by luck. Taking the best
/// of several parts makes the bar higher, not lower. A second A/B of the
/// composite against the best part would also measure it, at the price of
/// another A/B (and floor) per composition; this rule costs nothing more.
pub(super) fn beats(composite: Interval, best_part: f64, stage: StageId) -> Result<(), String> {
    if composite.high < best_part {
        return Ok(());
    }
    Err(format!(
        "the composite won against the live profile, but its interval [{}, {}] is not wholly \
         below the confirmed effect {} of its best part, stage #{stage}: approve that stage alone",
        crate::display::percent(composite.low),
        crate::display::percent(composite.high),
        crate::display::percent(best_part),
    ))
}

/// Which staged wins to combine next: the best staged win of each menu
/// entry, then of those the largest set (ties: the best summed effect) not
/// tried before on this live profile and not within a staged composite.
/// Best part first.
fn choose(
    singles: &[(StageId, MenuId, f64)],
    tried: &[BTreeSet<StageId>],
    staged_composites: &[BTreeSet<StageId>],
) -> Option<Vec<StageId>> {
    let mut best: Vec<(StageId, MenuId, f64)> = Vec::new();
    for &(id, menu, effect) in singles {
        match best.iter_mut().find(|b| b.1 == menu) {
            Some(b) if effect < b.2 => *b = (id, menu, effect),
            Some(_) => {}
            None => best.push((id, menu, effect)),
        }
    }
    best.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)));
    let n = best.len();
    let mut sets: Vec<Vec<(StageId, MenuId, f64)>> = (1u32..(1 << n))
        .filter(|mask| mask.count_ones() >= 2)
        .map(|mask| {
            (0..n)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| best[i])
                .collect()
        })
        .collect();
    let sum = |s: &[(StageId, MenuId, f64)]| s.iter().map(|p| p.2).sum::<f64>();
    sets.sort_by(|a, b| b.len().cmp(&a.len()).then(sum(a).total_cmp(&sum(b))));
    sets.into_iter()
        .map(|s| s.into_iter().map(|p| p.0).collect::<Vec<_>>())
        .find(|ids| {
            let set: BTreeSet<StageId> = ids.iter().copied().collect();
            !tried.contains(&set) && !staged_composites.iter().any(|c| set.is_subset(c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: i64) -> StageId {
        StageId(n)
    }

    #[test]
    fn the_best_win_of_each_entry_is_combined_best_first() {
        let singles = [
            (s(1), MenuId::RerankPins, -0.10),
            (s(2), MenuId::StageSpeculative, -0.20),
            (s(3), MenuId::RerankPins, -0.15),
        ];
        assert_eq!(choose(&singles, &[], &[]), Some(vec![s(2), s(3)]));
        // One entry alone is nothing to combine.
        assert_eq!(choose(&singles[..1], &[], &[]), None);
        assert_eq!(choose(&[singles[0], singles[2]], &[], &[]), None);
    }

    #[test]
    fn a_tried_set_is_not_tried_again_and_smaller_sets_follow() {
        let singles = [
            (s(1), MenuId::RerankPins, -0.10),
            (s(2), MenuId::StageSpeculative, -0.20),
            (s(3), MenuId::DeepenWarmSet, -0.05),
        ];
        let all: BTreeSet<_> = [s(1), s(2), s(3)].into();
        assert_eq!(choose(&singles, &[], &[]), Some(vec![s(2), s(1), s(3)]));
        // The three were refused: the best pair is next.
        assert_eq!(
            choose(&singles, std::slice::from_ref(&all), &[]),
            Some(vec![s(2), s(1)])
        );
        // A staged composite of all three leaves nothing within it to try.
        assert_eq!(choose(&singles, &[], &[all]), None);
    }

    #[test]
    fn a_composite_beats_its_best_part_only_when_its_interval_is_below_it() {
        let i = |low, high| Interval { low, high };
        assert!(beats(i(-0.40, -0.25), -0.20, s(3)).is_ok());
        // Its estimate is better, but its interval reaches the part's effect.
        let err = beats(i(-0.40, -0.20), -0.20, s(3)).unwrap_err();
        assert!(
            err.contains("stage #3") && err.contains("approve that stage alone"),
            "{err}"
        );
        assert!(beats(i(-0.30, -0.10), -0.20, s(3)).is_err());
    }
}
