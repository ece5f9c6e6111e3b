//! What an approved stage realized on the live server, beside what it
//! claimed, for `stage list` and `stage show` (text and JSON).

use serde_json::{Value, json};

use crate::display;
use crate::ledger::{Interval, RealizationAttempt, Realized, StageId};
use crate::vocab::VerdictKind;

/// The claim a stage carries: its confirmation's effect and interval.
#[derive(Debug, Clone, Copy)]
pub(super) struct Claim {
    pub id: StageId,
    pub effect: f64,
    pub interval: Interval,
}

/// One line for people: realized against claimed, or why not (yet);
/// `None` when there is nothing to realize.
pub(super) fn line(claim: Claim, r: Realized<'_>) -> Option<String> {
    let claimed = format!(
        "claimed {}",
        display::effect(claim.effect, claim.interval.low, claim.interval.high)
    );
    Some(match r {
        Realized::NotApplied => return None,
        Realized::Measured(a) => measured(claim, a, &claimed),
        Realized::Measuring => format!("being measured on the live server now ({claimed})"),
        Realized::GivenUp(a) => format!(
            "NOT realized: {} attempts on the live server decided nothing, the last \
             (experiment #{}) {}: {} ({claimed})",
            crate::ledger::MAX_REALIZATION_ATTEMPTS,
            a.experiment_id,
            a.verdict.map_or("-", VerdictKind::as_str),
            a.reason.as_deref().unwrap_or("no reason recorded")
        ),
        Realized::Waiting(Some(n)) => {
            format!(
                "not realized yet: {} (since {}; {claimed})",
                n.note, n.noted_at
            )
        }
        Realized::Waiting(None) => format!(
            "not realized yet: its stack's daemon measures it once the live server runs it \
             ({claimed})"
        ),
    })
}

fn measured(claim: Claim, a: &RealizationAttempt, claimed: &str) -> String {
    let effect = match (a.effect, a.interval) {
        (Some(e), Some(i)) => display::effect(e, i.low, i.high),
        _ => "-".to_string(),
    };
    let floor = a
        .noise_floor
        .map(|f| display::verdict_floor(f, a.floor_is_bound))
        .unwrap_or_else(|| "-".into());
    let how = format!(
        "on the live server against a shadow of the replaced profile (experiment #{}, {} pairs, \
         floor {floor}); {claimed}",
        a.experiment_id,
        a.pairs.unwrap_or(0)
    );
    match a.verdict {
        Some(VerdictKind::Loss) => format!(
            "realized a LOSS {effect} {how}. The approval made the live server slower: \
             `orchestrator stage revert {} --reason \"realized a loss\"` puts the replaced \
             profile back",
            claim.id
        ),
        Some(VerdictKind::Win) => format!("realized a win {effect} {how}"),
        _ => format!("realized nothing beyond the noise {effect} {how}"),
    }
}

/// The same as JSON: `status` (`win`, `within_noise`, `loss`,
/// `measuring`, `given_up`, `unrealized`), the realized effect both ways
/// (log ratio and percent) beside the claimed one, and the line; `null`
/// when there is nothing to realize.
pub(super) fn json(claim: Claim, r: Realized<'_>) -> Value {
    let Some(status) = r.status() else {
        return Value::Null;
    };
    let pct = |x: f64| 100.0 * x.exp_m1();
    let mut v = json!({
        "status": status,
        "claimed_effect_log_ratio": claim.effect,
        "claimed_interval_log_ratio": [claim.interval.low, claim.interval.high],
        "claimed_effect_percent": pct(claim.effect),
        "claimed_interval_percent": [pct(claim.interval.low), pct(claim.interval.high)],
        "summary": line(claim, r),
    });
    let attempt = match r {
        Realized::Measured(a) | Realized::GivenUp(a) => Some(a),
        _ => None,
    };
    if let Some(a) = attempt {
        v["experiment_id"] = json!(a.experiment_id);
        v["verdict"] = json!(a.verdict);
        v["decided_at"] = json!(a.decided_at);
        v["pairs"] = json!(a.pairs);
        v["effect_log_ratio"] = json!(a.effect);
        v["interval_log_ratio"] = json!(a.interval.map(|i| [i.low, i.high]));
        v["effect_percent"] = json!(a.effect.map(pct));
        v["interval_percent"] = json!(a.interval.map(|i| [pct(i.low), pct(i.high)]));
        let floor = a.noise_floor.filter(|_| !a.floor_is_bound).map(pct);
        v["noise_floor_percent"] = json!(floor);
        if a.floor_is_bound {
            v["bound_percent"] = json!(a.noise_floor.map(pct));
        }
        v["reason"] = json!(a.reason);
    }
    if let Realized::Waiting(Some(n)) = r {
        v["note"] = json!(n.note);
        v["noted_at"] = json!(n.noted_at);
    }
    if matches!(r, Realized::Measured(a) if a.verdict == Some(VerdictKind::Loss)) {
        v["revert"] = json!(format!(
            "orchestrator stage revert {} --reason \"realized a loss\"",
            claim.id
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{ExperimentId, RealizationNote};

    fn claim() -> Claim {
        Claim {
            id: StageId(3),
            effect: -0.2,
            interval: Interval {
                low: -0.3,
                high: -0.1,
            },
        }
    }

    fn attempt(kind: VerdictKind, effect: f64) -> RealizationAttempt {
        RealizationAttempt {
            experiment_id: ExperimentId(12),
            ..RealizationAttempt::example(3, kind, effect, 0)
        }
    }

    #[test]
    fn a_realized_loss_says_so_and_names_the_revert() {
        let a = attempt(VerdictKind::Loss, 0.1);
        let text = line(claim(), Realized::Measured(&a)).unwrap();
        assert!(text.starts_with("realized a LOSS +10.5%"), "{text}");
        assert!(text.contains("claimed -18.1%"), "{text}");
        assert!(
            text.contains("`orchestrator stage revert 3 --reason"),
            "{text}"
        );
        let v = json(claim(), Realized::Measured(&a));
        assert_eq!(v["status"], "loss");
        assert_eq!(v["experiment_id"], 12);
        assert!(
            (v["effect_percent"].as_f64().unwrap() - 10.517).abs() < 0.01,
            "{v}"
        );
        assert!((v["claimed_effect_percent"].as_f64().unwrap() + 18.127).abs() < 0.01);
        assert!(v["revert"].as_str().unwrap().contains("stage revert 3"));

        let win = attempt(VerdictKind::Win, -0.15);
        let text = line(claim(), Realized::Measured(&win)).unwrap();
        assert!(text.starts_with("realized a win -13.9%"), "{text}");
        assert!(!text.contains("revert"), "{text}");
        assert!(json(claim(), Realized::Measured(&win))["revert"].is_null());
    }

    #[test]
    fn an_unrealized_stage_says_why_and_an_unapplied_one_says_nothing() {
        assert!(line(claim(), Realized::NotApplied).is_none());
        assert!(json(claim(), Realized::NotApplied).is_null());
        let n = RealizationNote {
            stage_id: StageId(3),
            noted_at: chrono::Utc::now(),
            note: "the config has no [stack.shadow]".into(),
        };
        let text = line(claim(), Realized::Waiting(Some(&n))).unwrap();
        assert!(
            text.starts_with("not realized yet: the config has no [stack.shadow]"),
            "{text}"
        );
        let v = json(claim(), Realized::Waiting(Some(&n)));
        assert_eq!(v["status"], "unrealized");
        assert_eq!(v["note"], "the config has no [stack.shadow]");
        assert!(v["effect_percent"].is_null(), "no verdict is made up: {v}");
    }
}
