//! Scenario files: a [`BuiltinScenario`] as JSON (`kvsim sweep --scenario-file`,
//! `kvsim check --scenario-file`, `kvsim scenarios --show NAME`). Strict: unknown fields are
//! errors, and every error names the JSON path it concerns.

use super::scenarios::{validate_scenario, BuiltinScenario};

/// Why a scenario file cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioFileError {
    /// Not JSON, or not a scenario file's shape (a missing field, a typo, a wrong type).
    #[error("at {path}: {message}")]
    Malformed {
        /// The JSON path, `$` for the top level.
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// Well-formed, but not a scenario kvsim can sweep (for example a pool smaller than one
    /// max-length request).
    #[error("scenario {name}: {message}")]
    Invalid {
        /// The scenario's `name`.
        name: String,
        /// Why it cannot be swept.
        message: String,
    },
}

/// Parses a scenario file's text; the scenario is not validated (see [`load_scenario_file`]).
pub fn parse_scenario_file(text: &str) -> Result<BuiltinScenario, ScenarioFileError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        ScenarioFileError::Malformed {
            path: if path == "." { "$".into() } else { format!("$.{path}") },
            message: e.inner().to_string(),
        }
    })
}

/// Parses and validates a scenario file's text: what `--scenario-file` accepts.
pub fn load_scenario_file(text: &str) -> Result<BuiltinScenario, ScenarioFileError> {
    let s = parse_scenario_file(text)?;
    validate_scenario(&s).map_err(|message| ScenarioFileError::Invalid {
        name: s.name.clone(),
        message,
    })?;
    Ok(s)
}

/// A scenario as a scenario file (pretty JSON, newline-terminated): what
/// `kvsim scenarios --show NAME` prints, and what [`load_scenario_file`] reads back.
pub fn scenario_file_json(s: &BuiltinScenario) -> String {
    let mut text = serde_json::to_string_pretty(s).expect("scenarios serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fpm::scenarios::builtin_scenarios;

    #[test]
    fn every_builtin_round_trips_through_its_file() {
        for s in builtin_scenarios() {
            let back = load_scenario_file(&scenario_file_json(&s)).unwrap();
            assert_eq!(back, s, "{}", s.name);
        }
    }

    #[test]
    fn errors_name_the_path_or_the_reason() {
        let mut v: serde_json::Value = serde_json::from_str(&scenario_file_json(&builtin_scenarios()[0])).unwrap();
        v["scenario"]["pool_blocks"] = "many".into();
        let e = load_scenario_file(&v.to_string()).unwrap_err();
        assert!(
            matches!(&e, ScenarioFileError::Malformed { path, .. } if path == "$.scenario.pool_blocks"),
            "{e}"
        );
        v["scenario"]["pool_blocks"] = 3.into();
        let e = load_scenario_file(&v.to_string()).unwrap_err();
        assert!(
            matches!(&e, ScenarioFileError::Invalid { message, .. } if message.contains("smaller than one")),
            "{e}"
        );
        let e = load_scenario_file("{\"name\": 1}").unwrap_err();
        assert!(
            matches!(&e, ScenarioFileError::Malformed { path, .. } if path == "$.name"),
            "{e}"
        );
        let e = load_scenario_file("not json").unwrap_err();
        assert!(
            matches!(&e, ScenarioFileError::Malformed { path, .. } if path == "$"),
            "{e}"
        );
    }
}
