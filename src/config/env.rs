//! Reading the process environment, for every setting that has a variable: one place, so that
//! every layer reports a variable that is not UTF-8 the same way.

use crate::error::{Error, Result};

/// The environment as the resolution reads it: a variable's value, `Ok(None)` when unset.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>>;

/// One environment variable: `Ok(None)` when unset, an error when it is not UTF-8.
pub(crate) fn env_var(key: &str) -> Result<Option<String>> {
    match std::env::var(key) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::InvalidConfig {
            key: key.into(),
            value: v.to_string_lossy().into_owned(),
            reason: "expected UTF-8 text".into(),
        }),
    }
}
