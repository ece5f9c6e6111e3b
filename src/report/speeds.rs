//! The live profile's measured speed in a period: the baseline runs of its
//! experiments grouped by experiment and by the profile they measured, the
//! measured parts of a token, and the sourced medians the projection
//! starts from.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::SpeedPoint;
use super::projection::Sourced;
use crate::judge::noise::median;
use crate::ledger::{ExperimentId, ReportRun, TokenParts};
use crate::vocab::{Arm, Digest};

/// How many refused deltas, mismatches and failure examples to list.
/// Baseline runs grouped by experiment, and by the profile they measured.
pub(super) struct Speeds {
    pub(super) points: Vec<SpeedPoint>,
    /// Every valid baseline value: when its experiment was created, which
    /// experiment, which base profile, and its measured parts.
    pub(super) values: Vec<(DateTime<Utc>, ExperimentId, Digest, f64)>,
    pub(super) parts: Vec<TokenParts>,
    /// The base of the latest experiment with a measured baseline.
    pub(super) live_base: Option<Digest>,
}

impl Speeds {
    pub(super) fn from_runs(runs: &[ReportRun]) -> Speeds {
        let mut per_exp: BTreeMap<ExperimentId, (DateTime<Utc>, Vec<f64>)> = BTreeMap::new();
        let mut values = Vec::new();
        let mut parts = Vec::new();
        for r in runs {
            if r.arm != Arm::Baseline || r.refused {
                continue;
            }
            // Built on a win that waited for approval, the baseline was that
            // win's candidate: not a speed the live profile ever served.
            if r.live_digest.as_ref().is_some_and(|l| *l != r.base_digest) {
                continue;
            }
            let Some(s) = r.seconds_per_token else {
                continue;
            };
            per_exp
                .entry(r.experiment_id)
                .or_insert_with(|| (r.created_at, Vec::new()))
                .1
                .push(s);
            values.push((r.created_at, r.experiment_id, r.base_digest.clone(), s));
            parts.push(r.parts);
        }
        let live_base = values
            .iter()
            .max_by_key(|v| (v.0, v.1))
            .map(|v| v.2.clone());
        let mut points: Vec<SpeedPoint> = per_exp
            .into_iter()
            .filter_map(|(id, (at, v))| {
                let runs = v.len();
                median(&v).map(|m| SpeedPoint {
                    at,
                    experiment: id,
                    seconds_per_token: m,
                    runs,
                })
            })
            .collect();
        points.sort_by_key(|p| (p.at, p.experiment));
        Speeds {
            points,
            values,
            parts,
            live_base,
        }
    }

    /// The baseline values of `base`, from `since` on when given.
    pub(super) fn of<'a>(
        &'a self,
        base: &'a Digest,
        since: Option<DateTime<Utc>>,
    ) -> impl Iterator<Item = &'a (DateTime<Utc>, ExperimentId, Digest, f64)> {
        self.values
            .iter()
            .filter(move |v| &v.2 == base && since.is_none_or(|t| v.0 >= t))
    }

    pub(super) fn median_of(&self, base: &Digest, since: Option<DateTime<Utc>>) -> Option<f64> {
        median(&self.of(base, since).map(|v| v.3).collect::<Vec<_>>())
    }

    /// The window the live speed is read from: the live base's runs,
    /// from the last baseline shift on (a shift before its first run does
    /// not narrow anything).
    pub(super) fn live_since(
        &self,
        since: Option<DateTime<Utc>>,
    ) -> Option<(&Digest, Option<DateTime<Utc>>)> {
        let base = self.live_base.as_ref()?;
        Some((
            base,
            since.filter(|t| self.of(base, Some(*t)).next().is_some()),
        ))
    }

    /// The median of one figure over the live base's baseline runs in the
    /// window that carry it, with the runs it comes from.
    pub(super) fn median_source(
        &self,
        since: Option<DateTime<Utc>>,
        what: &str,
        figure: impl Fn(usize) -> Option<f64>,
    ) -> Option<Sourced> {
        let (base, since) = self.live_since(since)?;
        let mut v = Vec::new();
        let mut ids = BTreeSet::new();
        for (i, row) in self.values.iter().enumerate() {
            if &row.2 != base || since.is_some_and(|t| row.0 < t) {
                continue;
            }
            if let Some(x) = figure(i) {
                v.push(x);
                ids.insert(row.1);
            }
        }
        let value = median(&v)?;
        let (first, last) = (ids.first()?, ids.last()?);
        let span = if first == last {
            format!("experiment #{first}")
        } else {
            format!("{} experiments, #{first} to #{last}", ids.len())
        };
        let after = since
            .map(|t| {
                format!(
                    ", since the baseline change point at {}",
                    t.format("%Y-%m-%d %H:%M UTC")
                )
            })
            .unwrap_or_default();
        Some(Sourced {
            value,
            source: format!(
                "median{what} of {} baseline runs ({span}) of the live profile {}{after}",
                v.len(),
                base.short()
            ),
        })
    }

    pub(super) fn live(&self, since: Option<DateTime<Utc>>) -> Option<Sourced> {
        self.median_source(since, "", |i| Some(self.values[i].3))
    }

    /// One measured part of the live profile, as the stack's runs report it.
    pub(super) fn live_part(
        &self,
        since: Option<DateTime<Utc>>,
        what: &str,
        of: impl Fn(&TokenParts) -> Option<f64>,
    ) -> Option<Sourced> {
        self.median_source(since, &format!(" {what}"), |i| of(&self.parts[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::menu::MenuId;
    use chrono::TimeZone;

    fn baseline(id: i64, base: &Digest, live: &Digest, spt: f64) -> ReportRun {
        ReportRun {
            experiment_id: ExperimentId(id),
            created_at: Utc.with_ymd_and_hms(2026, 12, 2, 8, 0, 0).unwrap()
                + chrono::Duration::seconds(id),
            menu_id: MenuId::StageSpeculative,
            base_digest: base.clone(),
            live_digest: Some(live.clone()),
            arm: Arm::Baseline,
            seconds_per_token: Some(spt),
            refused: false,
            parts: TokenParts::default(),
        }
    }

    #[test]
    fn the_live_speed_is_never_a_waiting_wins_candidate() {
        let live = Digest::of(b"live");
        let waiting = Digest::of(b"waiting win's candidate");
        // The last experiments built on a win that waits: their baseline is
        // its candidate, twice as fast as anything the live profile served.
        let runs = [
            baseline(1, &live, &live, 1.0),
            baseline(2, &live, &live, 1.2),
            baseline(3, &waiting, &live, 0.5),
            baseline(4, &waiting, &live, 0.5),
        ];
        let speeds = Speeds::from_runs(&runs);
        assert_eq!(speeds.live_base.as_ref(), Some(&live));
        let median = speeds.live(None).unwrap().value;
        assert!((median - 1.1).abs() < 1e-12, "{median}");
    }
}
