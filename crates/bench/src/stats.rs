//! Min/mean/max/stddev over iterations, as IOR and mdtest summarise.

use serde::Serialize;

/// Summary of a series of measurements.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Largest value.
    pub max: f64,
    /// Smallest value.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation.
    pub stddev: f64,
}

impl Summary {
    /// Summarises `values` (all zero for an empty series).
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary {
                max: 0.0,
                min: 0.0,
                mean: 0.0,
                stddev: 0.0,
            };
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Summary {
            max: values.iter().copied().fold(f64::MIN, f64::max),
            min: values.iter().copied().fold(f64::MAX, f64::min),
            mean,
            stddev: var.sqrt(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary() {
        let s = Summary::of(&[1.0, 2.0, 3.0]);
        assert_eq!((s.min, s.max, s.mean), (1.0, 3.0, 2.0));
        assert!((s.stddev - (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }
}
