//! Settings, resolved once: where partop's files live (`paths`) and what `config.toml` and the
//! flags say (`settings`), validated before any command runs. Below every layer but the domain.

pub mod file;
pub mod paths;
pub mod settings;

pub use file::{Config, ConfigError};
pub use settings::Settings;
