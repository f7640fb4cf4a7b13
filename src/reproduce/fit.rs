//! Fitting a profile's values, as `scripts/fit-*.py` do, so that
//! `udrma reproduce` can fit again on part of the published points and
//! say how well the model predicts the rest (cross-validation): each
//! value in turn is multiplied or divided by a factor, a change is kept
//! when it lowers the error, and the factor shrinks (its square root)
//! after every round. Deterministic: the same start and error give the
//! same values.

/// Named values (times in ns).
pub type Values = Vec<(&'static str, f64)>;

/// (label, ours, published) for some points, given the values: the
/// label says what each point is (a method, a side), so a fold's error
/// can be split by it.
pub type Pairs<'a, F, L> = &'a dyn Fn(&Values, &F) -> anyhow::Result<Vec<(L, f64, f64)>>;

/// Minimises `err` from `start` over `rounds` rounds of coordinate search
/// with a first factor of 2; returns the best values and their error.
pub fn coordinate_search(
    start: &Values,
    rounds: u32,
    err: &dyn Fn(&Values) -> anyhow::Result<f64>,
) -> anyhow::Result<(Values, f64)> {
    let mut best = start.clone();
    let mut best_err = err(&best)?;
    let mut step: f64 = 2.0;
    for _ in 0..rounds {
        for i in 0..best.len() {
            for f in [step, 1.0 / step] {
                let mut trial = best.clone();
                trial[i].1 *= f;
                let e = err(&trial)?;
                if e < best_err {
                    best = trial;
                    best_err = e;
                }
            }
        }
        step = step.sqrt();
    }
    Ok((best, best_err))
}

/// One fold of [`cross_validate`].
#[derive(Debug, Clone)]
pub struct Fold<F, L> {
    /// What was fitted.
    pub on: F,
    /// The fit's error there (rms log ratio).
    pub fit: f64,
    /// What was predicted.
    pub held: F,
    /// The (label, ours, published) points there, from the fitted values.
    pub predicted: Vec<(L, f64, f64)>,
}

impl<F, L: PartialEq> Fold<F, L> {
    /// The error at the predicted points (rms log ratio), of those
    /// labelled `label` only if one is given: NaN if none is, so that a
    /// label nothing carries fails every bound (`e <= bound` is false).
    pub fn predicted_error(&self, label: Option<&L>) -> f64 {
        let pairs: Vec<(f64, f64)> = (self.predicted.iter())
            .filter(|(l, _, _)| label.is_none_or(|x| x == l))
            .map(|(_, o, p)| (*o, *p))
            .collect();
        if pairs.is_empty() {
            return f64::NAN;
        }
        rms_log_ratio(&pairs)
    }
}

/// Cross-validation: for each fold `(on, held)`, fits from `start` to the
/// points `pairs(values, on)` gives (`rounds` rounds, the squared rms log
/// ratio as the error), then gives the fitted values' points at `held`.
pub fn cross_validate<F: Clone, L>(
    start: &Values,
    rounds: u32,
    folds: &[(F, F)],
    pairs: Pairs<'_, F, L>,
) -> anyhow::Result<Vec<Fold<F, L>>> {
    let mut out = Vec::new();
    for (on, held) in folds {
        let err = |v: &Values| -> anyhow::Result<f64> {
            let p: Vec<(f64, f64)> = pairs(v, on)?.into_iter().map(|(_, o, p)| (o, p)).collect();
            Ok(rms_log_ratio(&p).powi(2))
        };
        let (v, e) = coordinate_search(start, rounds, &err)?;
        out.push(Fold {
            on: on.clone(),
            fit: e.sqrt(),
            held: held.clone(),
            predicted: pairs(&v, held)?,
        });
    }
    Ok(out)
}

/// The root mean square of the natural log of each ratio (ours over
/// published): 0.05 is a typical error of about 5 %.
pub fn rms_log_ratio(pairs: &[(f64, f64)]) -> f64 {
    if pairs.is_empty() {
        return 0.0;
    }
    let sq: f64 = pairs.iter().map(|(o, p)| (o / p).ln().powi(2)).sum();
    (sq / pairs.len() as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fold's error splits by label: each label's points alone, or all.
    #[test]
    fn a_folds_error_splits_by_label() {
        let fold = Fold {
            on: 16,
            fit: 0.0,
            held: 32,
            predicted: vec![("host", 2.0, 1.0), ("nic", 1.0, 1.0), ("host", 1.0, 2.0)],
        };
        let ln2 = 2f64.ln();
        assert!((fold.predicted_error(Some(&"host")) - ln2).abs() < 1e-12);
        assert_eq!(fold.predicted_error(Some(&"nic")), 0.0);
        // A label no point carries fails any bound.
        let none = fold.predicted_error(Some(&"none"));
        let holds = none <= 0.15;
        assert!(none.is_nan() && !holds);
        let all = (2.0 * ln2 * ln2 / 3.0).sqrt();
        assert!((fold.predicted_error(None) - all).abs() < 1e-12);
    }

    #[test]
    fn the_search_finds_the_minimum_of_a_bowl_in_each_value() {
        // Error: squared log distance from (300, 40).
        let err = |v: &Values| -> anyhow::Result<f64> {
            Ok((v[0].1 / 300.0).ln().powi(2) + (v[1].1 / 40.0).ln().powi(2))
        };
        let (v, e) = coordinate_search(&vec![("a", 100.0), ("b", 100.0)], 12, &err).unwrap();
        assert!((v[0].1 / 300.0 - 1.0).abs() < 0.05, "{v:?}");
        assert!((v[1].1 / 40.0 - 1.0).abs() < 0.05, "{v:?}");
        assert!(e < 0.003, "{e}");
        // No round: the start, unchanged.
        let (v, _) = coordinate_search(&vec![("a", 100.0), ("b", 100.0)], 0, &err).unwrap();
        assert_eq!(v, vec![("a", 100.0), ("b", 100.0)]);
    }

    #[test]
    fn the_error_is_the_rms_of_log_ratios() {
        let e = rms_log_ratio(&[(2.0, 1.0), (1.0, 2.0)]);
        assert!((e - 2f64.ln()).abs() < 1e-12);
        assert_eq!(rms_log_ratio(&[(5.0, 5.0)]), 0.0);
        assert_eq!(rms_log_ratio(&[]), 0.0);
    }
}
