//! Small descriptive statistics for the soak table: quantiles and an
//! ordinary least-squares line with its fit quality.

/// The `q`-quantile (0..=1) by linear interpolation between order
/// statistics (Hyndman & Fan 1996, definition 7, R's default); `None` when
/// empty.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    Some(v[lo] + (h - h.floor()) * (v[hi] - v[lo]))
}

/// A least-squares line `y = a + slope · x`.
#[derive(Debug, Clone, Copy)]
pub struct Line {
    pub slope: f64,
    /// Coefficient of determination (1 = every point on the line).
    pub r2: f64,
    /// Largest absolute residual.
    pub max_residual: f64,
}

/// Ordinary least squares over `(x, y)`; `None` with fewer than two
/// distinct x.
pub fn fit(points: &[(f64, f64)]) -> Option<Line> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let residuals = points.iter().map(|p| p.1 - (intercept + slope * p.0));
    let ssr: f64 = residuals.clone().map(|r| r * r).sum();
    let max_residual = residuals.map(f64::abs).fold(0.0, f64::max);
    let r2 = if syy == 0.0 { 1.0 } else { 1.0 - ssr / syy };
    Some(Line {
        slope,
        r2,
        max_residual,
    })
}
