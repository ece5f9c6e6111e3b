//! Whether the proposer may choose `remeasure` this cycle. An A/A measures
//! a noise floor and nothing else, so it is offered only with a reason:
//! the floor of the protocol it would measure is missing or stale
//! ([`super::floor`]: too old, another profile, too wide, measured under
//! another CPU pressure or contention), or the live metrics moved for good
//! since it was measured (a PELT change point beyond the floor in the
//! observed seconds per token, the cycles' observations and a waiting
//! daemon's glances, [`crate::judge::changepoint::drift_since`]), unless
//! the live server served only the daemon's own requests since
//! ([`crate::measure::stand_aside::StandAside::only_own_requests_within`]).
//! A floor missing only because none was measured on this profile is
//! withheld too once the loop has measured something there, or from the
//! start when no experiment on the menu is judged by that floor, until the
//! live metrics drift (`remeasure_idle`): no decision waits for it.
//! Otherwise it is withheld ([`Withheld`]): the schema leaves it out, the
//! validator refuses it by name, the prompt says why, and the bandit does
//! not schedule it.

use chrono::{DateTime, Utc};

use super::{CurrentFloor, CycleRunner};
use crate::brain::Proposer;
use crate::clock::Clock;
use crate::judge::changepoint::drift_since;
use crate::ledger::{ExperimentOutcome, LedgerError};
use crate::measure::scorer::Scorer;
use crate::menu::{MenuId, Withheld};
use crate::profile::ProfileFile;
use crate::vocab::{Digest, Method, VerdictKind};

/// How many observations the drift is looked for in: a day of cycles at
/// the demo's interval is more than enough to see a level, and the query
/// stays a short walk of the newest rows.
const OBSERVATIONS: u32 = 48;

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// `None` while `remeasure` is offered on `base` in `menu` (with the
    /// reason logged), else why it is withheld: its floor is fresh
    /// ([`Self::remeasure_withheld`]), or no decision waits for it
    /// ([`Self::remeasure_idle`]). The floor is read once for both.
    /// `built_on_staged`: `base` is a waiting win's candidate, whose A/A
    /// is a bench run.
    pub(super) async fn remeasure_offer(
        &self,
        menu: &crate::menu::Menu,
        base: &ProfileFile,
        built_on_staged: bool,
        history: &[ExperimentOutcome],
    ) -> Result<Option<Withheld>, LedgerError> {
        // Off the menu, or no way to measure it (a remeasure chosen then
        // fails the cycle loudly, saying what the config lacks).
        let Some((method, current)) = self.remeasure_floor(base, built_on_staged).await? else {
            return Ok(None);
        };
        if let Some(w) = self
            .remeasure_withheld(method, &current, base, history)
            .await?
        {
            return Ok(Some(w));
        }
        self.remeasure_idle(menu, method, &current, base, history)
            .await
    }

    /// Why `remeasure` is withheld on `base`, whose `method` floor is
    /// `current`, because that floor is fresh (or the machine was too
    /// noisy for one lately), if it is.
    async fn remeasure_withheld(
        &self,
        method: Method,
        current: &CurrentFloor,
        base: &ProfileFile,
        history: &[ExperimentOutcome],
    ) -> Result<Option<Withheld>, LedgerError> {
        let Some(row) = current.row.as_ref().filter(|_| !current.stale) else {
            let backoff = self.noisy_backoff();
            let digest = base.profile.digest();
            if let Some(w) = too_noisy_lately(history, &digest, self.clock.now(), backoff) {
                return Ok(Some(w));
            }
            if let Some(why) = &current.why {
                tracing::debug!("remeasure is offered: {why}");
            }
            return Ok(None);
        };
        let floor = row.value.max(self.policy.min_floor.get());
        let age = (self.clock.now() - row.measured_at)
            .to_std()
            .unwrap_or_default();
        // A live server that served only the daemon's own requests since
        // moved its metrics by the daemon's doing, not the serving's.
        let only_ours = self
            .stand_aside
            .is_some_and(|sa| sa.only_own_requests_within(age));
        match self.live_drift_since(row.measured_at, floor).await? {
            Some(moved) if only_ours => {
                tracing::debug!("remeasure stays withheld: {moved}, by the daemon's own requests")
            }
            Some(moved) => {
                tracing::info!("remeasure is offered: {moved}");
                return Ok(None);
            }
            None => {}
        }
        let since = if only_ours {
            "the live server has served only the daemon's own requests since"
        } else {
            "the live metrics have not moved since"
        };
        Ok(Some(Withheld {
            experiment: MenuId::Remeasure,
            why: format!(
                "the {method} noise floor is fresh (measured {} ago on this profile under the \
                 same load, and {since}), so an A/A would tell nothing new",
                crate::display::age(chrono::Duration::from_std(age).unwrap_or_default())
            ),
        }))
    }

    /// Why the proposal menu (and so the convergence look) leaves an
    /// offered `remeasure` out, if it does: the A/A is offered only because
    /// no floor of its protocol was measured on `base` (none yet, or the
    /// live profile changed since), the loop has already measured
    /// something on `base` (or nothing yet, and no experiment on the menu
    /// is judged by that protocol's floor), and the live metrics have not
    /// moved since (beyond `min_noise_floor`, the drift floor a waiting
    /// loop wakes on without a floor of its own). No
    /// decision waits for that floor: an A/B and a realization measure
    /// theirs in their own cycle when they need one. Its A/A was then the
    /// converged loop's largest engine item, which no decision used (the
    /// shoot-out's B at 3e1662d: 46 runs, 4-6 engine s of a seed's 9-17,
    /// 2026-12-05), and the served model, offered it while other arms were
    /// left, chose it on every seed (the shoot-out's B at b800840: 46 runs,
    /// 6 engine s of 15-18). A drift offers it with a reason, and the first
    /// cycle on a profile may still choose it when the menu's experiments
    /// are judged by its floor. A menu of `remeasure` alone keeps it: the
    /// A/A is that loop's only job.
    async fn remeasure_idle(
        &self,
        menu: &crate::menu::Menu,
        method: Method,
        current: &CurrentFloor,
        base: &ProfileFile,
        history: &[ExperimentOutcome],
    ) -> Result<Option<Withheld>, LedgerError> {
        // `remeasure_floor` found `remeasure` on the configured menu, and the
        // proposal menu still offers it: its exclusions and closings name a
        // parameter, which `remeasure` has none of, and nothing withheld it.
        if menu.entries().iter().all(|e| e.id == MenuId::Remeasure) {
            return Ok(None);
        }
        let digest = base.profile.digest();
        if current
            .row
            .as_ref()
            .is_some_and(|r| r.profile_digest == digest)
        {
            // Measured here and stale for the machine's sake: due.
            return Ok(None);
        }
        let last = history
            .iter()
            .filter(|e| e.base_digest == digest)
            .map(|e| e.created_at)
            .max();
        // Nothing measured on `base` yet: the floor is the next A/B's when
        // an experiment on the menu is judged by it, so the first cycle may
        // take it. When none is (the demo's menu measures its experiments
        // with the bench and `remeasure` with the live server), that A/A
        // judges nothing here: the live profile it is measured on changes
        // with the first approval, before any realization could use it.
        // Offered anyway, the served model took it first on every fresh
        // start, and beside two CPU hogs it was 259 of the first
        // experiment's 465 s (docs/measured/first_ten_minutes.md, 03a02fa).
        let since = match last {
            Some(at) => at,
            None if judges_an_experiment(menu, method, |m| self.candidate_method(m)) => {
                return Ok(None);
            }
            None => DateTime::<Utc>::MIN_UTC,
        };
        let age = (self.clock.now() - since).to_std().unwrap_or_default();
        let only_ours = self
            .stand_aside
            .is_some_and(|sa| sa.only_own_requests_within(age));
        if !only_ours
            && let Some(moved) = self
                .live_drift_since(since, self.policy.min_floor.get())
                .await?
        {
            tracing::info!("remeasure is due: {moved}");
            return Ok(None);
        }
        let judged_by = if last.is_none() {
            format!(" (no experiment on the menu is measured through the {method} protocol)")
        } else {
            String::new()
        };
        Ok(Some(Withheld {
            experiment: MenuId::Remeasure,
            why: format!(
                "no {method} noise floor was measured on this profile and no decision waits for \
                 one{judged_by}, since an A/B or a realization measures its own when it needs it; \
                 its A/A waits for the live metrics to drift"
            ),
        }))
    }

    /// The protocol a `remeasure` on `base` would measure, and its current
    /// floor; `None` when the menu has no `remeasure` or the config no way
    /// to measure it.
    pub(super) async fn remeasure_floor(
        &self,
        base: &ProfileFile,
        built_on_staged: bool,
    ) -> Result<Option<(Method, CurrentFloor)>, LedgerError> {
        let Ok(entry) = self.menu.entry(MenuId::Remeasure) else {
            return Ok(None);
        };
        let Some(scorer) = self.floor_scorer(entry.method, built_on_staged) else {
            return Ok(None);
        };
        let method = scorer.method();
        Ok(Some((method, self.floor(method, base, None).await?)))
    }

    /// How the live seconds per token moved for good since `since`, beyond
    /// `floor` (a log ratio), if it did.
    pub(super) async fn live_drift_since(
        &self,
        since: DateTime<Utc>,
        floor: f64,
    ) -> Result<Option<String>, LedgerError> {
        let mut series: Vec<(DateTime<Utc>, f64)> = self
            .ledger
            .recent_observed_metrics(OBSERVATIONS)
            .await?
            .into_iter()
            .filter_map(|(at, m)| {
                let spt = m.get(crate::observe::SECONDS_PER_TOKEN)?.as_f64()?;
                Some((at, spt))
            })
            .chain(self.glances.iter().copied())
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect();
        series.sort_by_key(|(at, _)| *at);
        let from = series.partition_point(|(at, _)| *at <= since);
        let values: Vec<f64> = series.iter().map(|(_, v)| *v).collect();
        Ok(drift_since(&values, from, floor).map(|d| {
            format!(
                "the live seconds per token moved from {:.4} to {:.4} (at {} UTC) since the noise \
                 floor was measured",
                d.before,
                d.after,
                series[d.index].0.format("%Y-%m-%d %H:%M:%S")
            )
        }))
    }
}

/// Whether an experiment of `menu` other than `remeasure` is judged by the
/// floor of `method`: its A/B runs under that protocol (`measured_by`, the
/// scorer an A/B of a menu method gets).
fn judges_an_experiment(
    menu: &crate::menu::Menu,
    method: Method,
    measured_by: impl Fn(Method) -> Option<Method>,
) -> bool {
    super::candidate_methods_of(menu, measured_by).contains(&method)
}

/// Why `remeasure` waits though the floor is missing or stale: the newest
/// A/A on the base `digest` (in `history`, newest first) was too noisy to
/// give a floor (`inconclusive`) less than `backoff` (`[cycle] max_wait_s`,
/// or `[measure] noise_floor_max_age_s` when shorter) before `now`. Another one at once meets the same machine: a shoot-out
/// loop measured the live floor twice in a row, 5 engine s each, the first
/// inconclusive (2026-12-05). It is offered again after that wait, which is
/// also the longest a converged loop waits before it looks again.
fn too_noisy_lately(
    history: &[ExperimentOutcome],
    digest: &Digest,
    now: DateTime<Utc>,
    backoff: std::time::Duration,
) -> Option<Withheld> {
    let last = history.iter().find(|e| {
        e.menu_id == MenuId::Remeasure
            && &e.base_digest == digest
            && e.verdict.is_some()
            && e.confirmation_of.is_none()
    })?;
    let age = (now - last.created_at).to_std().unwrap_or_default();
    (last.verdict == Some(VerdictKind::Inconclusive) && age < backoff).then(|| Withheld {
        experiment: MenuId::Remeasure,
        why: format!(
            "the last A/A on this profile (experiment {}, {} ago) was too noisy to give a \
             floor, and another is offered once that one is {} old ([cycle] max_wait_s, at most \
             [measure] noise_floor_max_age_s)",
            last.experiment_id,
            crate::display::age(chrono::Duration::from_std(age).unwrap_or_default()),
            crate::display::age(chrono::Duration::from_std(backoff).unwrap_or_default())
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brain::double::{measured_on, warm};

    /// The repository's menu measures its experiments with the bench and
    /// `remeasure` with the live server: the live server's floor judges
    /// none of them, so the first cycle is not offered it; a menu whose
    /// experiments run under the floor's protocol is.
    #[test]
    fn a_floor_judges_an_experiment_only_when_one_runs_under_its_protocol() {
        let menu = crate::brain::double::repo_menu();
        let scorers = |m: Method| Some(m);
        assert!(!judges_an_experiment(&menu, Method::Surface, scorers));
        assert!(judges_an_experiment(&menu, Method::Bench, scorers));
        // A stack with no bench measures surface experiments in a shadow
        // and its A/As on the live server: that floor judges them.
        assert!(judges_an_experiment(&menu, Method::Surface, |_| Some(
            Method::Surface
        )));
        // A stack that cannot measure the experiments at all.
        assert!(!judges_an_experiment(&menu, Method::Bench, |_| None));
    }

    #[test]
    fn an_inconclusive_floor_withholds_remeasure_for_the_backoff_only() {
        let base = Digest::of(b"base");
        let aa = crate::brain::bandit::remeasure();
        let at = |verdict| measured_on(7, &aa, verdict, base.clone());
        let made = at(VerdictKind::Inconclusive).created_at;
        let hour = std::time::Duration::from_secs(3600);
        let minutes = |m: i64| made + chrono::Duration::minutes(m);
        let history = vec![at(VerdictKind::Inconclusive)];
        let w = too_noisy_lately(&history, &base, minutes(10), hour).expect("withheld");
        assert_eq!(w.experiment, MenuId::Remeasure);
        assert!(
            w.why
                .starts_with("the last A/A on this profile (experiment 7, 10m")
                && w.why.contains("too noisy to give a floor"),
            "{}",
            w.why
        );
        // Once the backoff passed, or after a floor that decided, or on
        // another profile: offered.
        assert!(too_noisy_lately(&history, &base, minutes(61), hour).is_none());
        let decided = vec![at(VerdictKind::WithinNoise), at(VerdictKind::Inconclusive)];
        assert!(too_noisy_lately(&decided, &base, minutes(10), hour).is_none());
        assert!(too_noisy_lately(&history, &Digest::of(b"other"), minutes(10), hour).is_none());
        // An A/B's inconclusive verdict is no floor's.
        let ab = vec![measured_on(
            8,
            &warm(64),
            VerdictKind::Inconclusive,
            base.clone(),
        )];
        assert!(too_noisy_lately(&ab, &base, minutes(10), hour).is_none());
    }
}
