//! `--scenario NAME | --scenario-file F`, shared by the commands that take a scenario.

use std::path::PathBuf;

use kvsim_core::fpm::scenarios::{builtin_scenarios, find_scenario, BuiltinScenario};

use super::CliError;

/// A built-in scenario by name, or a scenario file (`kvsim sweep --scenario-file`'s format).
pub fn load_scenario(name: Option<&str>, file: Option<&PathBuf>) -> Result<BuiltinScenario, CliError> {
    match (name, file) {
        (Some(name), _) => find_scenario(name).ok_or_else(|| {
            let names: Vec<String> = builtin_scenarios().into_iter().map(|s| s.name).collect();
            CliError::Input(format!("unknown scenario {name:?}; built-in: {}", names.join(", ")))
        }),
        (None, Some(path)) => {
            let text = super::read_file(path)?;
            let de = &mut serde_json::Deserializer::from_str(&text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                CliError::Input(format!(
                    "{}: at {}: {}",
                    path.display(),
                    kvsim_core::plan::json_path("$", &e.path().to_string()),
                    e.inner()
                ))
            })
        }
        (None, None) => Err(CliError::Input("give --scenario NAME or --scenario-file FILE".into())),
    }
}
