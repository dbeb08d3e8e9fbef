//! One module per subcommand group.

pub mod journal;
pub mod codex;
pub mod probe;
pub mod history;
pub mod memory;
pub mod demo;
pub mod api;
pub mod api_steer;
pub mod mock;
