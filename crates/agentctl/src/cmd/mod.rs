//! One module per subcommand group.

pub mod api;
pub mod api_steer;
pub mod codex;
pub mod decide;
pub mod demo;
pub mod history;
pub mod journal;
pub mod memory;
pub mod mock;
pub mod probe;
pub mod run;
pub mod runs;
pub mod sandbox;
pub mod serve;
pub mod trust;
