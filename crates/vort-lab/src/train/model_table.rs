//! The `[model]` table of a run config as written, read into [`vort::model::ModelConfig`]: the
//! current form (`[model.mixer]`), or the flat mixer fields of configs written before the
//! mixer had its own table (`memory = "vort"`, `vort_mode`, `banks`, `delta`, `router`,
//! `router_bias_init`, `power_law_alpha`, `horizon`, `soe_eps`, `mixture_m`,
//! `mixture_min_rate`, `softmax_window`), so every committed run directory, checkpoint and
//! export stays readable. They are written back in the new form. This reader belongs to the
//! lab's file formats, not to the layer: `vort::model::ModelConfig` reads the new form only.

use serde::{Deserialize, Deserializer};
use vort::features::FeatureMap;
use vort::model::{ModelConfig, ModelError};
use vort::{Mixer, NodeMode, NodeSpec, Routing};

/// `#[serde(deserialize_with)]` of [`super::RunConfig::model`].
pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ModelConfig, D::Error> {
    ModelConfigToml::deserialize(d)?
        .into_config()
        .map_err(serde::de::Error::custom)
}

/// The `[model]` table as written: the current form (`[model.mixer]`), or the flat fields of
/// configs written before it (all optional, with the defaults they had).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ModelConfigToml {
    d_model: usize,
    layers: usize,
    heads: usize,
    head_dim: usize,
    features: usize,
    feature_map: FeatureMap,
    mlp_mult: usize,
    chunk: usize,
    token_shift: bool,
    short_conv: usize,
    qk_scale_init: f64,
    eps_den: f64,
    mixer: Option<Mixer>,
    // the flat form
    memory: Option<String>,
    vort_mode: Option<NodeMode>,
    banks: Option<usize>,
    delta: Option<f64>,
    router: Option<Routing>,
    router_bias_init: Option<f64>,
    power_law_alpha: Option<f64>,
    horizon: Option<u64>,
    soe_eps: Option<f64>,
    mixture_m: Option<usize>,
    mixture_min_rate: Option<f64>,
    softmax_window: Option<usize>,
}

impl Default for ModelConfigToml {
    fn default() -> Self {
        let d = ModelConfig::default();
        ModelConfigToml {
            d_model: d.d_model,
            layers: d.layers,
            heads: d.heads,
            head_dim: d.head_dim,
            features: d.features,
            feature_map: d.feature_map,
            mlp_mult: d.mlp_mult,
            chunk: d.chunk,
            token_shift: d.token_shift,
            short_conv: d.short_conv,
            qk_scale_init: d.qk_scale_init,
            eps_den: d.eps_den,
            mixer: None,
            memory: None,
            vort_mode: None,
            banks: None,
            delta: None,
            router: None,
            router_bias_init: None,
            power_law_alpha: None,
            horizon: None,
            soe_eps: None,
            mixture_m: None,
            mixture_min_rate: None,
            softmax_window: None,
        }
    }
}

impl ModelConfigToml {
    /// The mixer the flat fields describe (each missing one at the default it had).
    fn flat_mixer(&self) -> Result<Mixer, ModelError> {
        let kind = self.memory.as_deref().unwrap_or("vort");
        let horizon = self.horizon.unwrap_or(0);
        let eps = self.soe_eps.unwrap_or(1e-3);
        Ok(
            match Mixer::of_kind(kind).map_err(|_| ModelError::UnknownMixer(kind.into()))? {
                Mixer::Vort { .. } => Mixer::Vort {
                    nodes: NodeSpec {
                        mode: self.vort_mode.unwrap_or_default(),
                        banks: self.banks.unwrap_or(4),
                        delta: self.delta.unwrap_or(0.1),
                        horizon,
                        eps,
                    },
                    routing: self.router.unwrap_or_default(),
                    router_bias_init: self.router_bias_init.unwrap_or(0.0),
                },
                Mixer::PowerLaw { .. } => Mixer::PowerLaw {
                    alpha: self.power_law_alpha.unwrap_or(0.8),
                    horizon,
                    eps,
                },
                Mixer::Mixture { .. } => Mixer::Mixture {
                    m: self.mixture_m.unwrap_or(5),
                    min_rate: self.mixture_min_rate.unwrap_or(1e-3),
                },
                Mixer::Softmax { .. } => Mixer::Softmax {
                    window: self.softmax_window.unwrap_or(0),
                },
                other => other,
            },
        )
    }

    fn has_flat_fields(&self) -> bool {
        self.memory.is_some()
            || self.vort_mode.is_some()
            || self.banks.is_some()
            || self.delta.is_some()
            || self.router.is_some()
            || self.router_bias_init.is_some()
            || self.power_law_alpha.is_some()
            || self.horizon.is_some()
            || self.soe_eps.is_some()
            || self.mixture_m.is_some()
            || self.mixture_min_rate.is_some()
            || self.softmax_window.is_some()
    }
}

impl ModelConfigToml {
    /// The model config this table describes.
    fn into_config(self) -> Result<ModelConfig, ModelError> {
        let t = self;
        let mixer = match (&t.mixer, t.has_flat_fields()) {
            (Some(_), true) => {
                return Err(ModelError::Invalid(
                    "[model] has both a [model.mixer] table and the old flat mixer fields \
                     (memory, vort_mode, banks, delta, router, ...): keep one"
                        .into(),
                ))
            }
            (Some(m), false) => m.clone(),
            (None, _) => t.flat_mixer()?,
        };
        Ok(ModelConfig {
            d_model: t.d_model,
            layers: t.layers,
            heads: t.heads,
            head_dim: t.head_dim,
            features: t.features,
            feature_map: t.feature_map,
            mlp_mult: t.mlp_mult,
            chunk: t.chunk,
            token_shift: t.token_shift,
            short_conv: t.short_conv,
            qk_scale_init: t.qk_scale_init,
            eps_den: t.eps_den,
            mixer,
        })
    }
}
