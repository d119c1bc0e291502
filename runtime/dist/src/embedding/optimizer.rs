//! Sparse optimizers with WholeGraph's definitions: each updates one row
//! from its summed gradient, and only the rows a step touched.
//!
//! In the formulas `lr` is given at each step, `g` is the row's gradient
//! summed over the batch, `w` the row, `wd` the weight decay; all
//! arithmetic is f64 (rows and states of f32 are widened, updated and
//! rounded once when stored).
//!
//! - `sgd`: g += wd·w; w −= lr·g.
//! - `adagrad` (state `state_sum`): g += wd·w; state_sum += g²;
//!   w −= lr·g / (√state_sum + ε).
//! - `rmsprop` (state `v`, no momentum): g += wd·w; v = α·v + (1 − α)·g²;
//!   w −= lr·g / (√v + ε).
//! - `lazy_adam` (states `m`, `v`, and per row `beta_powers` = (β1^t,
//!   β2^t), t counting that row's updates, kept in f64): g += wd·w, or
//!   with `adamw` the decoupled w −= lr·wd·w first; m = β1·m + (1 − β1)·g;
//!   v = β2·v + (1 − β2)·g²; w −= lr·(m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε).
//!   Rows a step does not touch keep m, v and t.

use tiga_runtime::element::ElementType;

/// An optimizer and its hyper-parameters (module doc). ε defaults to
/// 1e-8 for each, as in WholeGraph.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    Sgd { weight_decay: f64 },
    Adagrad { weight_decay: f64, eps: f64 },
    RmsProp { weight_decay: f64, alpha: f64, eps: f64 },
    LazyAdam { weight_decay: f64, beta1: f64, beta2: f64, eps: f64, adamw: bool },
}

/// A state tensor an optimizer keeps beside the embedding: its name,
/// element type (`None`: the embedding's), and row width (`None`: the
/// embedding's dimension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSpec {
    pub name: &'static str,
    pub dtype: Option<ElementType>,
    pub width: Option<usize>,
}

const EPS: f64 = 1e-8;

impl Optimizer {
    pub fn sgd() -> Optimizer {
        Optimizer::Sgd { weight_decay: 0.0 }
    }

    pub fn adagrad() -> Optimizer {
        Optimizer::Adagrad { weight_decay: 0.0, eps: EPS }
    }

    pub fn rmsprop() -> Optimizer {
        Optimizer::RmsProp { weight_decay: 0.0, alpha: 0.99, eps: EPS }
    }

    pub fn lazy_adam() -> Optimizer {
        Optimizer::LazyAdam { weight_decay: 0.0, beta1: 0.9, beta2: 0.999, eps: EPS, adamw: false }
    }

    /// The optimizer named `name` (`sgd`, `adagrad`, `rmsprop`,
    /// `lazy_adam`) with its defaults.
    pub fn parse(name: &str) -> Option<Optimizer> {
        Some(match name {
            "sgd" => Self::sgd(),
            "adagrad" => Self::adagrad(),
            "rmsprop" => Self::rmsprop(),
            "lazy_adam" => Self::lazy_adam(),
            _ => return None,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Adagrad { .. } => "adagrad",
            Optimizer::RmsProp { .. } => "rmsprop",
            Optimizer::LazyAdam { .. } => "lazy_adam",
        }
    }

    /// The same optimizer with weight decay `wd`.
    pub fn with_weight_decay(mut self, wd: f64) -> Optimizer {
        match &mut self {
            Optimizer::Sgd { weight_decay }
            | Optimizer::Adagrad { weight_decay, .. }
            | Optimizer::RmsProp { weight_decay, .. }
            | Optimizer::LazyAdam { weight_decay, .. } => *weight_decay = wd,
        }
        self
    }

    /// The states it keeps beside the embedding, in the order
    /// [`Optimizer::update_row`] takes them.
    pub fn states(&self) -> &'static [StateSpec] {
        const SUM: StateSpec = StateSpec { name: "state_sum", dtype: None, width: None };
        const V: StateSpec = StateSpec { name: "v", dtype: None, width: None };
        const M: StateSpec = StateSpec { name: "m", dtype: None, width: None };
        const POWERS: StateSpec = StateSpec { name: "beta_powers", dtype: Some(ElementType::F64), width: Some(2) };
        match self {
            Optimizer::Sgd { .. } => &[],
            Optimizer::Adagrad { .. } => &[SUM],
            Optimizer::RmsProp { .. } => &[V],
            Optimizer::LazyAdam { .. } => &[M, V, POWERS],
        }
    }

    /// What a fresh state row holds (zeros; the beta powers start at 1).
    pub fn initial(&self, state: &str) -> f64 {
        if state == "beta_powers" {
            1.0
        } else {
            0.0
        }
    }

    /// Update row `w` from its summed gradient `g` (changed: the decay is
    /// added to it) and its `states` rows, in [`Optimizer::states`]' order.
    pub fn update_row(&self, lr: f64, w: &mut [f64], g: &mut [f64], states: &mut [Vec<f64>]) {
        match *self {
            Optimizer::Sgd { weight_decay } => {
                for (w, g) in w.iter_mut().zip(g.iter_mut()) {
                    *g += weight_decay * *w;
                    *w -= lr * *g;
                }
            }
            Optimizer::Adagrad { weight_decay, eps } => {
                let [sum] = states else { return };
                for ((w, g), s) in w.iter_mut().zip(g.iter_mut()).zip(sum.iter_mut()) {
                    *g += weight_decay * *w;
                    *s += *g * *g;
                    *w -= lr * *g / (s.sqrt() + eps);
                }
            }
            Optimizer::RmsProp { weight_decay, alpha, eps } => {
                let [v] = states else { return };
                for ((w, g), v) in w.iter_mut().zip(g.iter_mut()).zip(v.iter_mut()) {
                    *g += weight_decay * *w;
                    *v = alpha * *v + (1.0 - alpha) * *g * *g;
                    *w -= lr * *g / (v.sqrt() + eps);
                }
            }
            Optimizer::LazyAdam { weight_decay, beta1, beta2, eps, adamw } => {
                let [m, v, powers] = states else { return };
                let [p1, p2] = powers.as_mut_slice() else { return };
                *p1 *= beta1;
                *p2 *= beta2;
                let (c1, c2) = (1.0 - *p1, 1.0 - *p2);
                for (((w, g), m), v) in w.iter_mut().zip(g.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut()) {
                    if adamw {
                        *w -= lr * weight_decay * *w;
                    } else {
                        *g += weight_decay * *w;
                    }
                    *m = beta1 * *m + (1.0 - beta1) * *g;
                    *v = beta2 * *v + (1.0 - beta2) * *g * *g;
                    *w -= lr * (*m / c1) / ((*v / c2).sqrt() + eps);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_adam_step_is_a_signed_learning_rate() {
        // After one step m̂ = g and v̂ = g², so w moves by lr·g/(|g| + ε).
        let opt = Optimizer::lazy_adam();
        let mut w = [1.0, -2.0];
        let mut g = [0.5, -4.0];
        let mut states = vec![vec![0.0; 2], vec![0.0; 2], vec![1.0, 1.0]];
        opt.update_row(0.1, &mut w, &mut g, &mut states);
        assert!((w[0] - (1.0 - 0.1 * 0.5 / (0.5 + 1e-8))).abs() < 1e-15);
        assert!((w[1] - (-2.0 + 0.1 * 4.0 / (4.0 + 1e-8))).abs() < 1e-15);
        assert_eq!(states[2], vec![0.9, 0.999]);
    }

    #[test]
    fn names_parse_back() {
        for o in [Optimizer::sgd(), Optimizer::adagrad(), Optimizer::rmsprop(), Optimizer::lazy_adam()] {
            assert_eq!(Optimizer::parse(o.name()), Some(o));
        }
        assert_eq!(Optimizer::parse("adam"), None);
    }
}
